-- claim_entry(), the claim of a work entry, for claim and claim_next.
-- Includes: common, keys, tenants, terminal

-- The pickup histogram's bucket (an index of PICKUP_FIELDS) of a first claim at
-- `now` of a task created at `created` (the record's `ca`): both on this server's
-- clock, so no host's clock skews it. From the creation, not from the work entry,
-- which a task waiting in its tenant's queue gets only when it is dispatched.
local function pickup_bucket(created, now)
  local waited = now - (tonumber(created) or now)
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

-- Two workers claiming in the same millisecond (one of them on a promoted replica
-- that lost the other's claim) still get different fences: the fence's low bits
-- are a hash of the consumer's name. Hashed once per script call, not per claim
-- (2.6 us each for a typical name).
local tiebreaks = {}
local function tiebreak_of(consumer)
  local tiebreak = tiebreaks[consumer]
  if not tiebreak then
    tiebreak = 0
    for i = 1, #consumer do
      tiebreak = (tiebreak * 31 + string.byte(consumer, i)) % 1024
    end
    tiebreaks[consumer] = tiebreak
  end
  return tiebreak
end

-- The record's `ce` for a claim that ends its task: which claim it was, so that the
-- same claim run again (its reply lost) is told the same. Built only on those rare
-- paths, never for a claim that runs its task.
local function claim_mark(entry_id, consumer)
  return entry_id .. ' ' .. consumer
end

-- A capped tenant is at its cap: its task goes back to the head of its queue (it
-- keeps its place in the tenant's order), its entry is dropped, and the tenant
-- waits parked; nothing else about the task changes (no attempt is counted).
-- keys: as claim_entry's
local function defer(keys, tag, tenant, cap, task_id, entries, now)
  for _, entry in pairs(entries) do
    drop_entry(keys[6], entry)
  end
  redis.call('HDEL', keys[1], 'wk')
  local queue_key = tag .. KEY_QUEUE .. tenant
  queue_lives_to(queue_key, redis.call('LPUSH', queue_key, task_id),
    tonumber(redis.call('HGET', keys[1], 'ex')) or 0)
  -- A tenant that never queued here (its tasks went straight to the stream) has no
  -- settings yet: its cap at least (its weight comes with its next queued create).
  redis.call('HSETNX', tag .. KEY_TENANTS, tenant, '1 ' .. cap)
  park(tag, tenant, tag .. KEY_RUN .. tenant, now)
  redis.call('HINCRBY', keys[8], STATS_QUEUED, 1)
  redis.call('HINCRBY', keys[8], STATS_DEFERRED, 1)
end

-- The long fields a claim returns, joined from their pieces (read_all's `joined`).
local CLAIM_JOINED = {'or', 'pl', 'tp'}

-- The claim of one work entry, shared by claim (an entry the worker read or
-- reclaimed) and claim_next (entries read inside the script). See claim.lua's
-- header for the outcomes. A first claim that runs the task is counted in
-- `pickups` (see record_pickups). A task of a capped tenant (the record's `tc`)
-- runs only while fewer than its tenant's cap (the current one when the tenant
-- waits here, else the task's own) of the tenant's tasks hold a live lease (the
-- tenant's run set, in this partition: a capped tenant's tasks all live in its
-- home partition); otherwise it is deferred back to its tenant's queue.
-- `now` is the server's clock (now_ms()), read once per script call: a batch's
-- claims share it (one TIME where there was one a claim).
-- keys: {task, requests, issued, answers, journal, work, events, stats}
-- call: what the script call shares: {now, event_opts, pickups, texts (the lease
--   deadline and the fence floor as text, made here once: a call has one consumer
--   and one lease length), buckets (creation ms -> pickup bucket, filled here)};
--   and terminate()'s.
local function claim_entry(keys, task_id, entry_id, consumer, lease_ms, max_attempts,
                           poison_error, call)
  local task_key = keys[1]
  local work_key = keys[6]
  local now = call.now
  -- A claim needs most of the record (13 fields, most of them absent on a first
  -- claim): read whole, in one walk of it (read_all).
  local t = read_all(task_key, CLAIM_JOINED)
  local status = t.st
  if not status then
    drop_entry(work_key, entry_id)
    return {RC_NOT_FOUND}
  end
  if TERMINAL[status] then
    drop_entry(work_key, entry_id)
    if t.ce == claim_mark(entry_id, consumer) then
      -- The claim that ended the task, run again after its reply was lost: it is
      -- told what it was told then, not that some other call ended the task.
      confirm_state(task_key, 'st', status)
      return {status == ST_CANCELLED and RC_CANCELLED or RC_POISONED}
    end
    return {RC_TERMINAL}
  end
  if t.ld and tonumber(t.ld) > now then
    if t.lo == consumer and t.wk == entry_id then
      -- No attempt is recorded when the lease came from a renewal before any
      -- claim; a nil here would cut the reply short (Lua tables end at a nil).
      return {RC_OK, tonumber(t.fn) or 0, tonumber(t.at) or 0, t['or'], t.pl or '', t.tp or ''}
    end
    if not t.wk then
      -- Dispatched in this script (work.lua's add_work left `wk` to the claim), yet
      -- leased: a stale holder renewed after the task went back to its queue. The
      -- entry is its work now (the holder's renewals take it over), as any entry is.
      redis.call('HSET', task_key, 'wk', entry_id)
    end
    return {RC_LEASE_HELD}
  end
  local entry = t.wk or entry_id
  if t.cx == '1' then
    terminate(keys, task_id, t, entry, {status = ST_CANCELLED}, call)
    redis.call('HSET', task_key, 'ce', claim_mark(entry_id, consumer))
    return {RC_CANCELLED}
  end
  -- A first claim's `at` is absent and its `fn` reads as '0': no tonumber (a strtod).
  local attempt = t.at and tonumber(t.at) + 1 or 1
  if attempt > max_attempts then
    terminate(keys, task_id, t, entry, {status = ST_FAILED, field = 'er', value = poison_error},
      call)
    redis.call('HSET', task_key, 'ce', claim_mark(entry_id, consumer))
    return {RC_POISONED}
  end
  local run_key = nil
  local cap = tonumber(t.tc)
  if cap and t.tn then
    local tag = tag_of(task_key, task_id)
    run_key = tag .. KEY_RUN .. t.tn
    -- The cap in force is the tenant's current one where its settings are kept (it
    -- waits here): its plan may have changed since this task was created.
    local current = redis.call('HGET', tag .. KEY_TENANTS, t.tn)
    if current then
      cap = select(2, tenant_settings(current))
    end
    local mine = tonumber(redis.call('ZSCORE', run_key, task_id))
    if cap > 0 and not (mine and mine > now) and running(run_key, now) >= cap then
      defer(keys, tag, t.tn, t.tc, task_id, {entry_id, t.wk ~= entry_id and t.wk or nil}, now)
      return {RC_DEFERRED}
    end
  end
  local floor = now * 1024 + tiebreak_of(consumer)
  local fence = math.max(t.fn == '0' and 1 or (tonumber(t.fn) or 0) + 1, floor)
  local deadline = now + lease_ms
  -- The call's deadline and fence floor as text, made once: a batch's claims share
  -- them (most fences are the floor), and each int_text was 2 % of a drained job.
  local texts = call.texts
  if not texts then
    texts = {deadline = int_text(deadline), floor = int_text(floor)}
    call.texts = texts
  end
  local fields = {'fn', fence == floor and texts.floor or int_text(fence),
    'at', attempt == 1 and '1' or int_text(attempt), 'lo', consumer, 'ld', texts.deadline}
  if not t.wk then
    -- Dispatched from its tenant's queue inside this script: this is its entry.
    fields[#fields + 1] = 'wk'
    fields[#fields + 1] = entry_id
  end
  redis.call('HSET', task_key, unpack(fields))
  if run_key then
    redis.call('ZREMRANGEBYSCORE', run_key, '-inf', int_text(now))
    redis.call('ZADD', run_key, texts.deadline, task_id)
    expire_with_last(run_key)
  end
  if attempt == 1 then
    -- A batch's tasks mostly share their creation's millisecond (they were created
    -- together): its bucket is found once (pickup_bucket parses `ca`).
    local buckets = call.buckets
    if not buckets then
      buckets = {}
      call.buckets = buckets
    end
    local bucket = buckets[t.ca]
    if not bucket then
      bucket = pickup_bucket(t.ca, now)
      buckets[t.ca] = bucket
    end
    call.pickups[bucket] = (call.pickups[bucket] or 0) + 1
  end
  return {RC_OK, fence, attempt, t['or'], t.pl or '', t.tp or ''}
end
