--[[
  finish: the one terminal transition a task gets (completed, failed or
  cancelled). The outcome and the terminal status are written together; the
  work entry is acknowledged and deleted, and data no longer needed (payload,
  input-request state) is dropped. A second finish gets RC_TERMINAL, even one
  asking for the identical outcome, unless it is a retry of the same call: the
  same operation ID (an unfenced call's random ID, kept in `op` once it wins),
  or, for a fenced call (operation ""), the same lease holder asking for the same
  transition again.

  The task stops counting against its tenant's quota and cap (terminal.lua);
  a task that never left its tenant's queue leaves it.

  Includes: common, keys, work, terminal

  KEYS:
    1 task           the task record hash
    2 requests       outstanding input requests
    3 issued         issued input keys
    4 answers        accepted answers not yet taken
    5 journal        the answer journal
    6 work           the partition's work stream
    7 events         the partition's event stream
    8 stats          the partition's stats hash (one more of `status`)
    9 signals        the partition's signal stream (what workers listen to)
  ARGV:
    1 task_id
    2 fence          "" for unfenced
    3 status         completed | failed | cancelled
    4 has_message    "1" when a status message is given
    5 message
    6 outcome_field  "rs" (result), "er" (error) or "" (none)
    7 outcome        msgpack
    8 operation      the unfenced call's operation ID; "" for a fenced call
    9 event_opts     the event stream's MAXLEN, then "p" to also SPUBLISH
  Returns:
    {RC_OK}          also when this very call was already applied (a retry)
    {RC_NOT_FOUND} | {RC_LEASE_LOST} | {RC_TERMINAL}
  Events: one entry; and one signal when the call is unfenced (not the lease
  holder's: a running worker's handler is then stopped at once).
]]
local task_key = KEYS[1]
local work_key = KEYS[6]
local signals_key = KEYS[9]
local task_id = ARGV[1]
local fence = ARGV[2]
local status = ARGV[3]
local has_message = ARGV[4] == '1'
local message = ARGV[5]
local outcome_field = ARGV[6]
local outcome = ARGV[7]
local operation = ARGV[8]
local event_opts = ARGV[9]

local ending = {status = status, message = has_message and message or nil,
  field = outcome_field ~= '' and outcome_field or nil, value = outcome}
local keys = leading_task_keys()
local call = {now = now_ms(), event_opts = event_opts}
local code, wrote = finish_task(keys, task_id, fence, ending, operation, call)
if not wrote then
  return {code}
end
ring_due(call, work_key)
if operation ~= '' then
  redis.call('HSET', task_key, 'op', operation)
end
if fence == '' then
  emit(signals_key, event_opts, task_id)
end
return {RC_OK}
