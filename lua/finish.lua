--[[
  finish: the one terminal transition a task gets (completed, failed or
  cancelled). The outcome and the terminal status are written together; the
  work entry is acknowledged and deleted, and data no longer needed (payload,
  input-request state) is dropped. A second finish gets RC_TERMINAL.

  KEYS:
    1 task           the task record hash
    2 requests       outstanding input requests
    3 issued         issued input keys
    4 answers        accepted answers not yet taken
    5 journal        the answer journal
    6 work           the partition's work stream
    7 events         the partition's event stream
  ARGV:
    1 task_id
    2 fence          "" for unfenced
    3 status         completed | failed | cancelled
    4 has_message    "1" when a status message is given
    5 message
    6 outcome_field  "rs" (result), "er" (error) or "" (none)
    7 outcome        msgpack
    8 events_maxlen
  Returns:
    {RC_OK}
    {RC_NOT_FOUND} | {RC_LEASE_LOST} | {RC_TERMINAL}
  Events: one entry.
]]
local task_key = KEYS[1]
local requests_key = KEYS[2]
local issued_key = KEYS[3]
local answers_key = KEYS[4]
local journal_key = KEYS[5]
local work_key = KEYS[6]
local events_key = KEYS[7]
local task_id = ARGV[1]
local fence = ARGV[2]
local status = ARGV[3]
local has_message = ARGV[4] == '1'
local message = ARGV[5]
local outcome_field = ARGV[6]
local outcome = ARGV[7]
local events_maxlen = ARGV[8]

local t = redis.call('HMGET', task_key, 'st', 'fn', 'ua', 'wk')
local guard = worker_guard(t[1], t[2], fence)
if guard ~= RC_OK then
  return {guard}
end

local fields = {'st', status, 'ua', int_text(next_update(now_ms(), t[3]))}
if has_message then
  table.insert(fields, 'sm')
  table.insert(fields, message)
end
if outcome_field ~= '' then
  table.insert(fields, outcome_field)
  table.insert(fields, outcome)
end
redis.call('HSET', task_key, unpack(fields))
if has_message then
  redis.call('HDEL', task_key, 'pl', 'wk')
else
  redis.call('HDEL', task_key, 'pl', 'wk', 'sm')
end
redis.call('DEL', requests_key, issued_key, answers_key, journal_key)
local entry = t[4]
if entry then
  -- pcall: an operator may have deleted the group; the entry goes regardless.
  redis.pcall('XACK', work_key, WORK_GROUP, entry)
  redis.call('XDEL', work_key, entry)
end
emit(events_key, events_maxlen, task_id)
return {RC_OK}
