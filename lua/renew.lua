--[[
  renew: a worker extends its lease. Moves the lease deadline and resets the
  work entry's idle time (XCLAIM to itself), so no other worker reclaims it,
  and reports whether a client asked to cancel. A capped tenant's task keeps
  counting as running: its run-set score (the lease deadline) moves too.
  XCLAIM writes first, which a Redis out of memory (noeviction) allows where it
  refuses HSET: a running task keeps its lease when Redis is full. A direct claim
  (`wk` DIRECT_ENTRY: no work entry) moves its lease set entry instead, after an
  HDEL that plays XCLAIM's part.

  Includes: common, keys, tenants

  KEYS:
    1 task           the task record hash
    2 work           the partition's work stream
  ARGV:
    1 task_id
    2 fence
    3 consumer       the worker's consumer name
    4 lease_ms
  Returns:
    {RC_OK, 0 | 1}   1 when cancellation was requested
    {RC_NOT_FOUND} | {RC_LEASE_LOST} | {RC_TERMINAL}
  Events: none.
]]
local task_key = KEYS[1]
local work_key = KEYS[2]
local task_id = ARGV[1]
local fence = ARGV[2]
local consumer = ARGV[3]
local lease_ms = tonumber(ARGV[4])

local t = read_record(task_key, 'st', 'fn', 'cx', 'wk', 'tn', 'tc')
local guard = worker_guard(t.st, t.fn, fence)
if guard ~= RC_OK then
  return {guard}
end
local deadline = now_ms() + lease_ms
if t.wk == DIRECT_ENTRY then
  -- A direct claim: its lease set entry moves with the deadline. HDEL first (`lo`,
  -- written again below), as XCLAIM is for an entry: a full Redis refuses a script
  -- whose first write is ZADD or HSET, and allows one that has written to go on.
  redis.call('HDEL', task_key, 'lo')
  redis.call('ZADD', leases_of(work_key), int_text(deadline), task_id)
elseif t.wk then
  -- pcall: a group deleted by an operator must not fail the renewal.
  redis.pcall('XCLAIM', work_key, WORK_GROUP, consumer, 0, t.wk, 'JUSTID')
end
redis.call('HSET', task_key, 'ld', int_text(deadline), 'lo', consumer)
if t.tn and t.tc then
  local run_key = tag_of(task_key, task_id) .. KEY_RUN .. t.tn
  redis.call('ZADD', run_key, int_text(deadline), task_id)
  expire_with_last(run_key)
end
if t.cx == '1' then
  return {RC_OK, 1}
end
return {RC_OK, 0}
