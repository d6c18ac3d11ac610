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

-- The lease set's entries of the call's direct claims (call.leased: deadline, ID,
-- ...), added with one ZADD: what a reclaim takes over once a deadline passed.
local function lease_direct(work_key, call)
  if #call.leased > 0 then
    redis.call('ZADD', leases_of(work_key), unpack(call.leased))
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
    drop_entry(keys.work, entry, task_id)
  end
  redis.call('HDEL', keys.task, 'wk')
  local queue_key = tag .. KEY_QUEUE .. tenant
  queue_lives_to(queue_key, redis.call('LPUSH', queue_key, task_id),
    tonumber(redis.call('HGET', keys.task, 'ex')) or 0)
  -- A tenant that never queued here (its tasks went straight to the stream) has no
  -- settings yet: its cap at least (its weight comes with its next queued create).
  redis.call('HSETNX', tag .. KEY_TENANTS, tenant, '1 ' .. cap)
  park(tag, tenant, tag .. KEY_RUN .. tenant, now)
  redis.call('HINCRBY', keys.stats, STATS_QUEUED, 1)
  redis.call('HINCRBY', keys.stats, STATS_DEFERRED, 1)
end

-- The long fields a claim returns, joined from their pieces (read_all's `joined`).
local CLAIM_JOINED = {'or', 'pl', 'tp'}

-- A run that replays (the task was parked, or a lease of it was lost) asks its
-- rounds again from the top; the answers recorded for them come with its claim, so
-- each answered round returns without a call (request_input, one round trip a
-- resumed run): {key, fingerprint, answer, ...} for every journaled key, none while
-- the task is not working (a round outstanding: the worker asks, and that call may
-- supersede it) and none for a key whose answer waits untaken (the worker's call
-- takes it, so take_answers does not hand it out again). Empty for a first run.
local NO_ANSWERS = {}
-- Past this many recorded answers the rounds go to their calls, round by round, as
-- before: HMGET's arguments are unpacked onto Lua's stack, which has a bound.
local MAX_RECORDED = 512
local function recorded_answers(keys, t)
  local resumed = t.np and t.np ~= '0'
  if not (resumed or t.at) or t.st ~= ST_WORKING then
    return NO_ANSWERS
  end
  local _, issued_key, answers_key, journal_key = input_keys(keys)
  local journal = redis.call('HGETALL', journal_key)
  if #journal == 0 or #journal > 2 * MAX_RECORDED then
    return NO_ANSWERS
  end
  local names = {}
  for i = 1, #journal, 2 do
    names[#names + 1] = journal[i]
  end
  local prints = redis.call('HMGET', issued_key, unpack(names))
  local untaken = {}
  if redis.call('EXISTS', answers_key) == 1 then
    untaken = redis.call('HMGET', answers_key, unpack(names))
  end
  local recorded = {}
  for n, name in ipairs(names) do
    if prints[n] and not untaken[n] then
      recorded[#recorded + 1] = name
      recorded[#recorded + 1] = prints[n]
      recorded[#recorded + 1] = journal[2 * n]
    end
  end
  return recorded
end

-- A claim that will not run the task because it is gone, ended, or leased: the
-- reply, or nil when none of these holds. The entry is dropped where the task will
-- never run; one dispatched in this script to a task a stale holder leased is
-- recorded as its work (`wk`), as every entry is.
local function unclaimable(keys, task_id, t, entry_id, call)
  local status = t.st
  if not status then
    drop_entry(keys.work, entry_id, task_id)
    return {RC_NOT_FOUND}
  end
  if TERMINAL[status] then
    drop_entry(keys.work, entry_id, task_id)
    if t.ce == claim_mark(entry_id, call.consumer) then
      -- The claim that ended the task, run again after its reply was lost: it is
      -- told what it was told then, not that some other call ended the task.
      confirm_state(keys.task, 'st', status)
      return {status == ST_CANCELLED and RC_CANCELLED or RC_POISONED}
    end
    return {RC_TERMINAL}
  end
  if call.reclaiming_direct and t.wk ~= DIRECT_ENTRY then
    -- A lease set entry read before the task was handed back or parked (it waits
    -- in its queue, or has a work entry of its own now): stale, it goes.
    redis.call('ZREM', leases_of(keys.work), task_id)
    return {RC_LEASE_HELD}
  end
  if t.ld and tonumber(t.ld) > call.now then
    if t.lo == call.consumer and t.wk == entry_id then
      -- No attempt is recorded when the lease came from a renewal before any
      -- claim; a nil here would cut the reply short (Lua tables end at a nil).
      return {RC_OK, tonumber(t.fn) or 0, tonumber(t.at) or 0, t['or'], t.pl or '', t.tp or '',
        t.np or '0', recorded_answers(keys, t)}
    end
    if not t.wk then
      -- Dispatched in this script (taken from its queue, or given an entry by
      -- add_work), yet leased: a stale holder renewed after the task went back to
      -- its queue. The entry is its work now (the holder's renewals take it over),
      -- as any entry is; a direct one's lease goes in the lease set, so that it is
      -- reclaimed when that holder stops renewing.
      redis.call('HSET', keys.task, 'wk', entry_id)
      if entry_id == DIRECT_ENTRY then
        redis.call('ZADD', leases_of(keys.work), t.ld, task_id)
      end
    end
    return {RC_LEASE_HELD}
  end
  return nil
end

-- A claim that ends the task instead of running it: cancellation was asked while no
-- lease held it, or it was claimed more than max_attempts times (poison). The reply,
-- or nil when it runs; `attempt` is the attempt this claim counts.
local function ended_at_claim(keys, task_id, t, entry_id, attempt, call)
  local ending = nil
  if t.cx == '1' then
    ending = {status = ST_CANCELLED}
  elseif attempt > call.max_attempts then
    ending = {status = ST_FAILED, field = 'er', value = call.poison_error}
  else
    return nil
  end
  terminate(keys, task_id, t, t.wk or entry_id, ending, call)
  redis.call('HSET', keys.task, 'ce', claim_mark(entry_id, call.consumer))
  return {ending.status == ST_CANCELLED and RC_CANCELLED or RC_POISONED}
end

-- For a task of a capped tenant (the record's `tc`): the tenant's run set, and
-- whether the task must wait (its tenant at its cap: the current one where the
-- tenant waits here, else the task's own) or may run (nil run set: not capped).
local function cap_reached(task_key, task_id, t, now)
  local cap = tonumber(t.tc)
  if not cap or not t.tn then
    return nil, false
  end
  local tag = tag_of(task_key, task_id)
  local run_key = tag .. KEY_RUN .. t.tn
  -- The cap in force is the tenant's current one where its settings are kept (it
  -- waits here): its plan may have changed since this task was created.
  local current = redis.call('HGET', tag .. KEY_TENANTS, t.tn)
  if current then
    cap = select(2, tenant_settings(current))
  end
  local mine = tonumber(redis.call('ZSCORE', run_key, task_id))
  return run_key, cap > 0 and not (mine and mine > now) and running(run_key, now) >= cap
end

-- The lease this claim takes: the fence, attempt, owner and deadline written (and
-- `wk` for an entry dispatched in this script), the run set's place for a capped
-- tenant, the pickup counted for a first claim. The reply.
local function take_lease(keys, task_id, t, entry_id, attempt, run_key, call)
  local task_key, now = keys.task, call.now
  local floor = now * 1024 + tiebreak_of(call.consumer)
  local fence = math.max(t.fn == '0' and 1 or (tonumber(t.fn) or 0) + 1, floor)
  -- The call's deadline and fence floor as text, made once: a batch's claims share
  -- them (most fences are the floor), and each int_text was 2 % of a drained job.
  local texts = call.texts
  if not texts then
    texts = {deadline = int_text(now + call.lease_ms), floor = int_text(floor)}
    call.texts = texts
  end
  local fields = {'fn', fence == floor and texts.floor or int_text(fence),
    'at', attempt == 1 and '1' or int_text(attempt), 'lo', call.consumer, 'ld', texts.deadline}
  if not t.wk then
    -- Dispatched from its tenant's queue inside this script: this is its entry.
    fields[#fields + 1] = 'wk'
    fields[#fields + 1] = entry_id
  end
  redis.call('HSET', task_key, unpack(fields))
  if entry_id == DIRECT_ENTRY then
    -- Claimed with no work entry (or reclaimed so): its lease deadline goes in the
    -- lease set, with the call's others (lease_direct, one ZADD a call).
    call.leased[#call.leased + 1] = texts.deadline
    call.leased[#call.leased + 1] = task_id
  end
  if run_key then
    redis.call('ZREMRANGEBYSCORE', run_key, '-inf', int_text(now))
    redis.call('ZADD', run_key, texts.deadline, task_id)
    expire_with_last(run_key)
  end
  if not t.at then
    -- Its first claim ever: one whose attempt was given back (handed back by a stopping
    -- worker, or parked) keeps `at` and is no pickup (timed from its create, one
    -- hand-back read as a pickup of a minute). A batch's tasks mostly share their
    -- creation's millisecond (they were created together): its bucket is found once
    -- (pickup_bucket parses `ca`).
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
  return {RC_OK, fence, attempt, t['or'], t.pl or '', t.tp or '', t.np or '0',
    recorded_answers(keys, t)}
end

-- The claim of one work entry, shared by claim (an entry the worker read or
-- reclaimed) and claim_next (entries read inside the script). See claim.lua's
-- header for the outcomes: settled when the task will not run (unclaimable, then
-- ended_at_claim), deferred back to its tenant's queue when a capped tenant
-- (cap_reached) holds as many live leases as its cap, else leased (take_lease). A first
-- claim that runs the task is counted in `pickups` (see record_pickups).
-- keys: terminate()'s, by name (keys.task: this task's record)
-- call: what the script call shares: {now (the server's clock, now_ms(), read once:
--   a batch's claims share it), consumer, lease_ms, max_attempts, poison_error (as
--   claim.lua's ARGV), pickups, texts (the lease deadline
--   and the fence floor as text, made here once: a call has one consumer and one
--   lease length), buckets (creation ms -> pickup bucket, filled here)}; and
--   terminate()'s.
local function claim_entry(keys, task_id, entry_id, call)
  local task_key = keys.task
  -- A claim needs most of the record (13 fields, most of them absent on a first
  -- claim): read whole, in one walk of it (read_all).
  local t = read_all(task_key, CLAIM_JOINED)
  local reply = unclaimable(keys, task_id, t, entry_id, call)
  if reply then
    return reply
  end
  -- A first claim's `at` is absent and its `fn` reads as '0': no tonumber (a strtod).
  local attempt = t.at and tonumber(t.at) + 1 or 1
  reply = ended_at_claim(keys, task_id, t, entry_id, attempt, call)
  if reply then
    return reply
  end
  local run_key, full = cap_reached(task_key, task_id, t, call.now)
  if full then
    defer(keys, tag_of(task_key, task_id), t.tn, t.tc, task_id,
      {entry_id, t.wk ~= entry_id and t.wk or nil}, call.now)
    return {RC_DEFERRED}
  end
  return take_lease(keys, task_id, t, entry_id, attempt, run_key, call)
end
