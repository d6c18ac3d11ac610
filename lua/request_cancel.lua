--[[
  request_cancel: authorize a client and record its durable cancellation
  intent. A worker may honor it, or completion may win. A terminal task
  accepts the request idempotently and changes nothing.

  Includes: common

  KEYS:
    1 task           the task record hash
    2 events         the partition's event stream
    3 signals        the partition's signal stream (what workers listen to)
    4 grant          the grant key of (task ID, endpoint, binding)
  ARGV:
    1 task_id
    2 binding        the record's digest of (task ID, endpoint, partition binding)
    3 event_opts     the event stream's MAXLEN, then "p" to also SPUBLISH
  Returns:
    {RC_OK}
    {RC_NOT_FOUND}   unknown, expired or unauthorized
  Events: one entry, and one signal for the task's worker, when the intent is
  first recorded on a live task.
]]
local task_key = KEYS[1]
local events_key = KEYS[2]
local signals_key = KEYS[3]
local grant_key = KEYS[4]
local task_id = ARGV[1]
local binding = ARGV[2]
local event_opts = ARGV[3]

if not granted(grant_key) then
  return {RC_NOT_FOUND}
end
local t = hmget(task_key, 'bd', 'st', 'cx')
if t[1] ~= binding then
  return {RC_NOT_FOUND}
end
if TERMINAL[t[2]] or t[3] == '1' then
  return {RC_OK}
end
redis.call('HSET', task_key, 'cx', '1')
emit(events_key, event_opts, task_id)
emit(signals_key, event_opts, task_id)
return {RC_OK}
