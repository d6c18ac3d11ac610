-- claim_entry(), the claim of a work entry, for claim and claim_next.
-- Includes: common

-- The pickup histogram's bucket (an index of PICKUP_FIELDS) of a first claim
-- of `entry_id` at `now`: from the entry's ID, stamped by this server's clock
-- when the task was enqueued, so no host's clock skews it.
local function pickup_bucket(entry_id, now)
  local waited = now - (tonumber(string.match(entry_id, '^(%d+)')) or now)
  for i = 1, #PICKUP_BOUNDS do
    if waited <= PICKUP_BOUNDS[i] then
      return i
    end
  end
  return #PICKUP_FIELDS
end

-- Add the first claims counted in `pickups` (bucket -> count) to the stats: one
-- HINCRBY per bucket met, so a batch of claims costs one or two commands.
local function record_pickups(stats_key, pickups)
  for bucket, count in pairs(pickups) do
    redis.call('HINCRBY', stats_key, PICKUP_FIELDS[bucket], count)
  end
end

-- The claim of one work entry, shared by claim (an entry the worker read or
-- reclaimed) and claim_next (entries read inside the script). See claim.lua's
-- header for the outcomes. A first claim that runs the task is counted in
-- `pickups` (see record_pickups).
-- keys: {task, requests, issued, answers, journal, work, events, stats}
local function claim_entry(keys, task_id, entry_id, consumer, lease_ms, max_attempts,
                           poison_error, event_opts, pickups)
  local task_key = keys[1]
  local work_key = keys[6]
  local t = hmget(task_key, 'st', 'fn', 'at', 'cx', 'ld', 'ua', 'wk', 'or', 'pl', 'lo', 'tp')
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
      -- No attempt is recorded when the lease came from a renewal before any
      -- claim; a nil here would cut the reply short (Lua tables end at a nil).
      return {RC_OK, tonumber(t[2]) or 0, tonumber(t[3]) or 0, t[8], t[9] or '', t[11] or ''}
    end
    return {RC_LEASE_HELD}
  end
  local entry = t[7] or entry_id
  if t[4] == '1' then
    terminate(keys, task_id, entry, t[6], ST_CANCELLED, nil, '', '', event_opts)
    return {RC_CANCELLED}
  end
  local attempt = (tonumber(t[3]) or 0) + 1
  if attempt > max_attempts then
    terminate(keys, task_id, entry, t[6], ST_FAILED, nil, 'er', poison_error, event_opts)
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
  if attempt == 1 then
    local bucket = pickup_bucket(entry_id, now)
    pickups[bucket] = (pickups[bucket] or 0) + 1
  end
  return {RC_OK, fence, attempt, t[8], t[9] or '', t[11] or ''}
end
