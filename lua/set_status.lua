--[[
  set_status: a worker reports progress, moving the task to working with a
  status message. From input_required this supersedes every outstanding
  request (their keys stay issued, so late answers are ignored). Repeating the
  current status and message changes nothing.

  Includes: common

  KEYS:
    1 task           the task record hash
    2 requests       outstanding input requests
    3 events         the partition's event stream
  ARGV:
    1 task_id
    2 fence          "" for unfenced
    3 has_message    "1" when a status message is given
    4 message
    5 event_opts     the event stream's MAXLEN, then "p" to also SPUBLISH
  Returns:
    {RC_OK}
    {RC_NOT_FOUND} | {RC_LEASE_LOST} | {RC_TERMINAL}
  Events: one entry when anything changed.
]]
local task_key = KEYS[1]
local requests_key = KEYS[2]
local events_key = KEYS[3]
local task_id = ARGV[1]
local fence = ARGV[2]
local has_message = ARGV[3] == '1'
local message = ARGV[4]
local event_opts = ARGV[5]

local t = read_record(task_key, 'st', 'fn', 'ua', 'sm')
local guard = worker_guard(t.st, t.fn, fence)
if guard ~= RC_OK then
  return {guard}
end
local current_message = t.sm
local same_message = (has_message and current_message == message)
  or (not has_message and not current_message)
if t.st == ST_WORKING and same_message then
  return {RC_OK}
end

write_status(task_key, ST_WORKING, has_message and message or nil, current_message, t.ua)
if t.st == ST_INPUT_REQUIRED then
  redis.call('DEL', requests_key)
end
emit(events_key, event_opts, task_id)
return {RC_OK}
