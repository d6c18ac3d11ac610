--[[
  create: store a new task and enqueue its work in one atomic step, so no
  outbox is needed and the task is readable the moment this returns.

  KEYS:
    1 task           the task record hash
    2 work           the partition's work stream
    3 events         the partition's event stream
    4 grant          the grant key of (endpoint, binding): a string "1"
  ARGV:
    1 task_id
    2 endpoint
    3 binding        "-" (anonymous) or "=<partition key>"
    4 origin         exact persisted bytes
    5 payload        opaque bytes
    6 ttl_ms         0: unlimited
    7 poll_ms        0: no suggested interval
    8 metadata       msgpack, or empty
    9 events         the event stream's MAXLEN, then "p" to also SPUBLISH
  Returns:
    {RC_OK, created_ms}
    {RC_EXISTS}      the ID is taken by another task; nothing is overwritten
  A retry of a create whose reply was lost finds its own task (same endpoint,
  binding and origin) and answers {RC_OK, created_ms} without a second task.
  Events: one entry for the new task.
]]
local task_key = KEYS[1]
local work_key = KEYS[2]
local events_key = KEYS[3]
local grant_key = KEYS[4]
local task_id = ARGV[1]
local endpoint = ARGV[2]
local binding = ARGV[3]
local origin = ARGV[4]
local payload = ARGV[5]
local ttl_ms = tonumber(ARGV[6])
local poll_ms = ARGV[7]
local metadata = ARGV[8]
local events = ARGV[9]

local existing = hmget(task_key, 'ep', 'pk', 'or', 'ca')
if existing[1] then
  if existing[1] == endpoint and existing[2] == binding and existing[3] == origin then
    return {RC_OK, tonumber(existing[4])}
  end
  return {RC_EXISTS}
end

local now = now_ms()
local entry = redis.call('XADD', work_key, '*', 't', task_id)
local fields = {
  'st', 'working', 'ca', int_text(now), 'ua', int_text(now), 'ttl', ARGV[6], 'pi', poll_ms,
  'fn', '0', 'wk', entry,
}
add_field(fields, 'ep', endpoint)
add_field(fields, 'pk', binding)
add_field(fields, 'or', origin)
add_field(fields, 'pl', payload)
if metadata ~= '' then
  add_field(fields, 'md', metadata)
end
if ttl_ms > 0 then
  table.insert(fields, 'ex')
  table.insert(fields, int_text(now + ttl_ms))
end
redis.call('HSET', task_key, unpack(fields))
if ttl_ms > 0 then
  redis.call('PEXPIREAT', task_key, now + ttl_ms)
  -- A string holding a shared integer: the smallest key Redis keeps.
  redis.call('SET', grant_key, '1', 'PXAT', now + ttl_ms)
else
  redis.call('SET', grant_key, '1')
end
emit(events_key, events, task_id)
return {RC_OK, now}
