--[[
  claim: a worker takes a task it read (or reclaimed) from the work stream.
  Bumps the fence, so every earlier holder's writes are refused from now on,
  counts the attempt, and records the lease. The new fence is above the old one
  and above the server clock (ms x 1024, plus a tiebreak from the consumer
  name): a claim lost in a failover is never re-issued with the same fence. A task that will never run is
  settled here instead: expired or already terminal (entry dropped), cancelled
  by a client while no worker was running it (ends cancelled), or delivered more
  than max_attempts times (ends failed: a poison task cannot loop forever).

  KEYS:
    1 task           the task record hash
    2 requests       outstanding input requests
    3 issued         issued input keys
    4 answers        accepted answers not yet taken
    5 journal        the answer journal
    6 work           the partition's work stream
    7 events         the partition's event stream
  ARGV:
    1 task_id
    2 entry_id       the work entry the worker read
    3 consumer       the worker's consumer name (lease owner)
    4 lease_ms
    5 max_attempts
    6 poison_error   msgpack JSON-RPC error for a poisoned task
    7 events_maxlen
  Returns:
    {RC_OK, fence, attempt, origin, payload}
    {RC_NOT_FOUND}   expired or unknown: entry dropped
    {RC_TERMINAL}    already terminal: entry dropped
    {RC_CANCELLED}   cancellation was requested while no worker ran it: ended cancelled
    {RC_POISONED}    attempts exhausted: ended failed with poison_error
    {RC_LEASE_HELD}  another worker's lease has not expired: nothing changed
  A retry by the same consumer for the same entry while its lease lasts gets
  that lease back ({RC_OK, ...}) without a second fence bump.
  Events: one entry when the task ends here.
]]
-- KEYS go to terminate() whole, in the order above.
local task_key = KEYS[1]
local work_key = KEYS[6]
local task_id = ARGV[1]
local entry_id = ARGV[2]
local consumer = ARGV[3]
local lease_ms = tonumber(ARGV[4])
local max_attempts = tonumber(ARGV[5])
local poison_error = ARGV[6]
local events_maxlen = ARGV[7]

local t = redis.call('HMGET', task_key, 'st', 'fn', 'at', 'cx', 'ld', 'ua', 'wk', 'or', 'pl', 'lo')
local status = t[1]
if not status then
  drop_entry(work_key, entry_id)
  return {RC_NOT_FOUND}
end
if TERMINAL[status] then
  drop_entry(work_key, entry_id)
  return {RC_TERMINAL}
end
local now = now_ms()
if t[5] and tonumber(t[5]) > now then
  if t[10] == consumer and t[7] == entry_id then
    return {RC_OK, tonumber(t[2]), tonumber(t[3]), t[8], t[9] or ''}
  end
  return {RC_LEASE_HELD}
end
local entry = t[7] or entry_id
if t[4] == '1' then
  terminate(KEYS, task_id, entry, t[6], 'cancelled', nil, '', '', events_maxlen)
  return {RC_CANCELLED}
end
local attempt = (tonumber(t[3]) or 0) + 1
if attempt > max_attempts then
  terminate(KEYS, task_id, entry, t[6], 'failed', nil, 'er', poison_error, events_maxlen)
  return {RC_POISONED}
end
-- Two workers claiming in the same millisecond (one of them on a promoted
-- replica that lost the other's claim) still get different fences.
local tiebreak = 0
for i = 1, #consumer do
  tiebreak = (tiebreak * 31 + string.byte(consumer, i)) % 1024
end
local fence = math.max((tonumber(t[2]) or 0) + 1, now * 1024 + tiebreak)
redis.call('HSET', task_key, 'fn', int_text(fence), 'at', int_text(attempt),
  'lo', consumer, 'ld', int_text(now + lease_ms))
return {RC_OK, fence, attempt, t[8], t[9] or ''}
