--[[
  create: store a new task and enqueue its work in one atomic step, so no
  outbox is needed and the task is readable the moment this returns.

  Includes: common

  KEYS:
    1 task           the task record hash
    2 work           the partition's work stream
    3 events         the partition's event stream
    4 grant          the grant key of (task ID, endpoint, binding): a string "1"
    5 stats          the partition's stats hash (one more `created`)
  ARGV:
    1 task_id
    2 binding        the record's digest of (task ID, endpoint, partition binding)
    3 origin         exact persisted bytes
    4 payload        opaque bytes
    5 ttl_ms         0: unlimited
    6 poll_ms        0: no suggested interval
    7 metadata       msgpack, or empty
    8 event_opts     the event stream's MAXLEN, then "p" to also SPUBLISH
    9 trace_context  the creating span's W3C trace context (traceparent, then a
                     space and tracestate), or empty: stored only when given
  Returns:
    {RC_OK, created_ms}
    {RC_EXISTS}      the ID is taken by another task; nothing is overwritten
  A retry of a create whose reply was lost finds its own task (same binding
  and origin) and answers {RC_OK, created_ms} without a second task. The record
  keeps the binding's digest only (`bd`), never the endpoint or partition key.
  The trace context (`tp`) lives while the task does: claims return it (the
  worker's span links to it) and the terminal transition drops it, like `pl`.
  Events: one entry for the new task.
]]
local task_key = KEYS[1]
local work_key = KEYS[2]
local events_key = KEYS[3]
local grant_key = KEYS[4]
local stats_key = KEYS[5]
local task_id = ARGV[1]
local binding = ARGV[2]
local origin = ARGV[3]
local payload = ARGV[4]
local ttl_ms = tonumber(ARGV[5])
local ttl_text = ARGV[5]
local poll_ms = ARGV[6]
local metadata = ARGV[7]
local event_opts = ARGV[8]
local trace_context = ARGV[9]

local existing = hmget(task_key, 'bd', 'or', 'ca')
if existing[1] then
  if existing[1] == binding and existing[2] == origin then
    return {RC_OK, tonumber(existing[3])}
  end
  return {RC_EXISTS}
end

local now = now_ms()
local entry = redis.call('XADD', work_key, '*', 't', task_id)
-- No `ua` (it reads as `ca` until the first update) and no `fn` (it reads as
-- 0 until the first claim): every byte of a record is kept for its retention.
local fields = {
  'st', ST_WORKING, 'ca', int_text(now), 'ttl', ttl_text, 'pi', poll_ms, 'wk', entry,
  'bd', binding,
}
add_field(fields, 'or', origin)
add_field(fields, 'pl', payload)
if metadata ~= '' then
  add_field(fields, 'md', metadata)
end
-- Absent unless a span was recorded: an untraced task keeps no byte for it.
if trace_context ~= '' then
  add_field(fields, 'tp', trace_context)
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
redis.call('HINCRBY', stats_key, STATS_CREATED, 1)
emit(events_key, event_opts, task_id)
return {RC_OK, now}
