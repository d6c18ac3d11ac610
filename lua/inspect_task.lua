--[[
  inspect_task: a read-only look at one task's bookkeeping for `redis-tasks
  inspect TASK_ID`: status, times, lease, fence, attempts, and where its work
  entry is. An operator's view, so no binding is checked: whoever can run this
  can read the keys anyway. Never returns the origin, payload, answers, result
  or status message; the error of a failed task goes back for its code alone.

  Includes: common

  KEYS:
    1 task           the task record hash
    2 requests       outstanding input requests
    3 work           the partition's work stream
  ARGV:
    none
  Returns:
    {RC_OK, now_ms, {st, ca, ua, ex, pi, fn, at, lo, ld, cx, wk, er, tn, pw, np}, requests,
     entry_state, entry_consumer, entry_idle_ms, entry_deliveries}
    requests         how many input requests are outstanding
    entry_state      'waiting', 'delivered', 'leased' (a direct claim: no entry, its
                     lease in the partition's lease set) or '' (no entry: a live
                     task without one waits in its tenant's queue), then the
                     consumer (a delivered or leased one's), idle time and delivery
                     count of a delivered one ('' otherwise)
    tn               the task's tenant digest
    pw, np           "1" while the task is parked (waiting for input, held by no
                     worker), and how many times it was parked
    {RC_NOT_FOUND}   unknown or expired
  Events: none (nothing is written).
]]
local task_key = KEYS[1]
local requests_key = KEYS[2]
local work_key = KEYS[3]

local t = hmget(task_key, 'st', 'ca', 'ua', 'ex', 'pi', 'fn', 'at', 'lo', 'ld', 'cx', 'wk', 'er',
  'tn', 'pw', 'np')
if not t[1] then
  return {RC_NOT_FOUND}
end
local now = now_ms()
for i = 1, 15 do
  t[i] = t[i] or ''
end
local requests = redis.call('HLEN', requests_key)
local entry = t[11]
if entry == '' then
  return {RC_OK, now, t, requests, '', '', '', ''}
end
if entry == DIRECT_ENTRY then
  -- Claimed straight from its tenant's queue: no entry, a lease in the lease set.
  return {RC_OK, now, t, requests, 'leased', t[8], '', ''}
end
local delivered = redis.pcall('XPENDING', work_key, WORK_GROUP, entry, entry, 1)
if type(delivered) == 'table' and delivered[1] then
  local p = delivered[1]
  return {RC_OK, now, t, requests, 'delivered', p[2], p[3], p[4]}
end
if redis.call('XRANGE', work_key, entry, entry)[1] then
  return {RC_OK, now, t, requests, 'waiting', '', '', ''}
end
return {RC_OK, now, t, requests, '', '', '', ''}
