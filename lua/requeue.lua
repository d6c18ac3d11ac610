--[[
  requeue: a worker was delivered an entry it has no capacity to run (other
  partitions filled its slots meanwhile). Instead of holding it, the entry goes
  back to the end of the stream as a fresh entry, where an idle worker's
  blocked reader receives it at once. Never claimed, so fence and attempts are
  untouched, and so is the rest of the record (the trace context included).
  Entries of tasks that are gone or terminal are just dropped.

  Includes: common, work

  KEYS:
    1 task           the task record hash
    2 work           the partition's work stream
  ARGV:
    1 task_id
    2 entry_id       the entry the worker was delivered
  Returns:
    {RC_OK}
  Events: none (nothing a client sees changes).
]]
local task_key = KEYS[1]
local work_key = KEYS[2]
local task_id = ARGV[1]
local entry_id = ARGV[2]

local t = read_record(task_key, 'st', 'wk')
drop_entry(work_key, entry_id, task_id)
if not t.st or TERMINAL[t.st] or t.wk ~= entry_id then
  return {RC_OK}
end
add_work(work_key, task_id, task_key)
return {RC_OK}
