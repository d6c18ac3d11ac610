--[[
  renew: a worker extends its lease. Moves the lease deadline and resets the
  work entry's idle time (XCLAIM to itself), so no other worker reclaims it,
  and reports whether a client asked to cancel.

  Includes: common

  KEYS:
    1 task           the task record hash
    2 work           the partition's work stream
  ARGV:
    1 fence
    2 consumer       the worker's consumer name
    3 lease_ms
  Returns:
    {RC_OK, 0 | 1}   1 when cancellation was requested
    {RC_NOT_FOUND} | {RC_LEASE_LOST} | {RC_TERMINAL}
  Events: none.
]]
local task_key = KEYS[1]
local work_key = KEYS[2]
local fence = ARGV[1]
local consumer = ARGV[2]
local lease_ms = tonumber(ARGV[3])

local t = redis.call('HMGET', task_key, 'st', 'fn', 'cx', 'wk')
local guard = worker_guard(t[1], t[2], fence)
if guard ~= RC_OK then
  return {guard}
end
redis.call('HSET', task_key, 'ld', int_text(now_ms() + lease_ms), 'lo', consumer)
if t[4] then
  -- pcall: a group deleted by an operator must not fail the renewal.
  redis.pcall('XCLAIM', work_key, WORK_GROUP, consumer, 0, t[4], 'JUSTID')
end
if t[3] == '1' then
  return {RC_OK, 1}
end
return {RC_OK, 0}
