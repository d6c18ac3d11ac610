--[[
  request_input: a worker asks the client for input. The round's keys that
  were answered before (by a run that crashed) give their recorded answers;
  the rest become the outstanding set, superseding any request left over from
  an earlier round. Re-issuing the current outstanding set is a no-op; an
  issued key reused for a different request is refused before any write.
  When every key is already answered the task is (or returns to) working.

  Includes: common

  KEYS:
    1 task           the task record hash
    2 requests       outstanding input requests (key -> kind..body)
    3 issued         every key ever issued (key -> request fingerprint)
    4 answers        accepted answers not yet taken by the worker
    5 journal        every accepted answer
    6 events         the partition's event stream
  ARGV:
    1 task_id
    2 fence          "" for unfenced
    3 has_message    "1" when a status message is given
    4 message
    5 event_opts     the event stream's MAXLEN, then "p" to also SPUBLISH
    6.. round        triples: key, fingerprint, kind..body: this round's requests
  Returns:
    {RC_OK, {key, answer, ...}}  recorded answers to this round's keys
    {RC_KEY_REUSED, key}
    {RC_NOT_FOUND} | {RC_LEASE_LOST} | {RC_TERMINAL}
  Events: one entry when the status, message or outstanding set changed.
]]
local task_key = KEYS[1]
local requests_key = KEYS[2]
local issued_key = KEYS[3]
local answers_key = KEYS[4]
local journal_key = KEYS[5]
local events_key = KEYS[6]
local task_id = ARGV[1]
local fence = ARGV[2]
local has_message = ARGV[3] == '1'
local message = ARGV[4]
local event_opts = ARGV[5]
local first_request = 6

local t = read_record(task_key, 'st', 'fn', 'ua', 'sm', 'ex')
local guard = worker_guard(t.st, t.fn, fence)
if guard ~= RC_OK then
  return {guard}
end
local status, current_message, expire_at = t.st, t.sm, t.ex

local keys = {}
for i = first_request, #ARGV, 3 do
  table.insert(keys, ARGV[i])
end
local issued = redis.call('HMGET', issued_key, unpack(keys))
local recorded = redis.call('HMGET', journal_key, unpack(keys))

local answers, answered_keys, pending, pending_keys, new_issued = {}, {}, {}, {}, {}
for n, key in ipairs(keys) do
  local i = first_request + (n - 1) * 3
  local fingerprint, body = ARGV[i + 1], ARGV[i + 2]
  if issued[n] and issued[n] ~= fingerprint then
    return {RC_KEY_REUSED, key}
  end
  if not issued[n] then
    table.insert(new_issued, key)
    table.insert(new_issued, fingerprint)
  end
  if recorded[n] then
    table.insert(answers, key)
    table.insert(answers, recorded[n])
    table.insert(answered_keys, key)
  else
    pending[key] = true
    table.insert(pending_keys, key)
    table.insert(pending_keys, body)
  end
end
if #answered_keys > 0 then
  -- Returned answers are consumed: take_answers must not hand them out again.
  redis.call('HDEL', answers_key, unpack(answered_keys))
end

local same_message = (has_message and current_message == message)
  or (not has_message and not current_message)

if #pending_keys == 0 then
  if status ~= ST_INPUT_REQUIRED then
    return {RC_OK, answers}
  end
  redis.call('DEL', requests_key)
  write_status(task_key, ST_WORKING, nil, current_message, t.ua)
  emit(events_key, event_opts, task_id)
  return {RC_OK, answers}
end

if status == ST_INPUT_REQUIRED and same_message then
  local outstanding = redis.call('HKEYS', requests_key)
  local unchanged = #outstanding * 2 == #pending_keys
  for _, key in ipairs(outstanding) do
    unchanged = unchanged and pending[key]
  end
  if unchanged then
    return {RC_OK, answers}
  end
end

redis.call('DEL', requests_key)
redis.call('HSET', requests_key, unpack(pending_keys))
expire_with_task(requests_key, expire_at)
if #new_issued > 0 then
  redis.call('HSET', issued_key, unpack(new_issued))
  expire_with_task(issued_key, expire_at)
end
write_status(task_key, ST_INPUT_REQUIRED, has_message and message or nil, current_message, t.ua)
emit(events_key, event_opts, task_id)
return {RC_OK, answers}
