--[[
  finish_batch: the fenced finishes of many tasks of one partition in one call,
  each exactly as finish.lua does it for its lease holder (operation ""): the
  same checks in the same order, the same terminal write, the same answer to a
  retry of the very same transition. What the tasks share is written once: the
  clock is read once, their work entries are acknowledged and deleted with one
  XACK and one XDEL (the leases of direct claims leave the partition's lease set
  with one ZREM), the stats count each status with one HINCRBY, and one event
  entry names every task it ended (published on a cluster as one line). A worker
  whose handlers end together so sends one script call per partition where it
  sent one per task. Unfenced finishes (a client's or an operator's) stay with
  finish.lua: they carry an operation ID and signal the task's worker.

  Includes: common, keys, work, terminal

  KEYS:
    1 work           the partition's work stream
    2 events         the partition's event stream
    3 stats          the partition's stats hash (one more of each status)
  ARGV:
    1 tag            the partition's hash tag, e.g. {rt:3.17}
    2 event_opts     the event stream's MAXLEN, then "p" to also SPUBLISH
    3.. outcomes     (task_id, fence, status, has_message, message, outcome_field,
                     outcome) a group per task, as finish.lua's ARGV 1 to 7 (the
                     loader checks this layout against the binding's FinishArgs
                     and the unpacking below, and gives the script OUTCOMES_FROM
                     and OUTCOMES_EACH)
  Returns:
    {RC_OK, code, code, ...}  one code per outcome, in order: RC_OK (also for the
    lease holder's same transition again), RC_NOT_FOUND (a task ID that names no
    task of this partition included), RC_LEASE_LOST or RC_TERMINAL
  Events: one entry for all the tasks it ends, their IDs separated by spaces;
  published ("p") as one line.
]]
local work_key = KEYS[1]
local events_key = KEYS[2]
local stats_key = KEYS[3]
local tag = ARGV[1]
local event_opts = ARGV[2]

local prefix = id_prefix_of(tag)
local out = {RC_OK}
local batch = {entries = {}, direct = {}, counts = {}, ended = {}}
local call = {now = now_ms(), event_opts = event_opts, outcomes = batch}
-- One keys table and one ending for the whole call, each task's written over the
-- last's: nothing keeps them past its task, and two tables a task were two more for
-- Lua to make and collect.
local keys = task_keys(tag, '', work_key, events_key, stats_key)
local ending = {}

for i = OUTCOMES_FROM, #ARGV - OUTCOMES_EACH + 1, OUTCOMES_EACH do
  local task_id, fence, status, has_message, message, outcome_field, outcome =
    unpack(ARGV, i, i + OUTCOMES_EACH - 1)
  -- Anything but a task ID of this partition must not become part of a key name.
  if not of_partition(task_id, prefix) then
    out[#out + 1] = RC_NOT_FOUND
  else
    ending.status = status
    ending.message = has_message == '1' and message or nil
    ending.field = outcome_field ~= '' and outcome_field or nil
    ending.value = outcome
    keys.task = record_key(tag, task_id)
    out[#out + 1] = (finish_task(keys, task_id, fence, ending, '', call))
  end
end
local entries = batch.entries
if #entries > 0 then
  -- pcall: an operator may have deleted the group; the entries go regardless.
  redis.pcall('XACK', work_key, WORK_GROUP, unpack(entries))
  redis.call('XDEL', work_key, unpack(entries))
end
if #batch.direct > 0 then
  redis.call('ZREM', leases_of(work_key), unpack(batch.direct))
end
for status, count in pairs(batch.counts) do
  redis.call('HINCRBY', stats_key, status, count)
end
if #batch.ended > 0 then
  emit(events_key, event_opts, table.concat(batch.ended, ' '))
end
ring_due(call, work_key)
return out
