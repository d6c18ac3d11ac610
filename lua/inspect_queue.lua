--[[
  inspect_queue: a read-only look at one partition's work queue, for `redis-tasks
  inspect` and the dashboard. One atomic step on one node's clock, so every
  figure of the partition belongs to the same instant. Its cost is bounded by
  `sample`: the oldest `sample` pending entries are looked up in their task
  records (two commands each), and at most `sample` waiting tenants (the ring's
  lowest passes first, then the parked ones) in their queues (three commands
  each); the rest are only counted.

  Includes: common, keys

  KEYS:
    1 work           the partition's work stream
    2 stats          the partition's stats hash
    3 ring           the partition's ring of tenants with tasks waiting
    4 parked         the partition's tenants parked at their concurrency cap
  ARGV:
    1 tag            the partition's hash tag, e.g. {rt:3.17}
    2 sample         the most pending entries (and consumers, and tenants) to report
  Returns:
    {RC_OK, now_ms, length, pending, oldest_waiting_id, oldest_pending_id,
     consumers, leases, stats, waiting, queues}
    length           XLEN: every entry (waiting or delivered), and the direct
                     claims' leases (each counted as an entry delivered)
    pending          entries delivered to a consumer and not finished, and the
                     direct claims' leases (the lease set: tasks a batch claim took
                     with no work entry)
    oldest_*_id      the first waiting / first delivered entry's ID, or ''
    consumers        {name, pending, idle_ms, ...} (at most `sample`); the owners
                     of the sampled direct claims' leases count them as pending
                     (one that holds no entry is listed, idle 0)
    leases           {entry_id, consumer, idle_ms, deliveries, task_id, status,
                      lease_owner, lease_deadline_ms, fence, attempts, tenant, ...}:
                     eleven per pending entry, '' where the task (or the entry) is
                     gone; `tenant` is the record's tenant digest (`tn`); then the
                     direct claims' (entry_id "0-1", DIRECT_ENTRY; the record's owner
                     and attempts as consumer and deliveries, idle 0), soonest
                     deadline first, up to `sample` rows in all
    stats            the stats hash, {field, value, ...}
    waiting          {ZCARD ring, ZCARD parked, parked tasks}: the tenants with
                     tasks waiting, then the tasks waiting for their client's input
                     (held by no worker; the partition's `waiting` set, not expired)
    queues           {tenant, queue_length, oldest_created_ms, parked, ...}: four
                     per sampled tenant; oldest_created_ms is the `ca` of the task
                     at the head of its queue ('' when that task is gone), parked
                     '1' for a tenant at its cap
  Never returns a task's origin, payload, answers, result or status message;
  tenants are their digests (the only thing Redis holds of them).
  Events: none (nothing is written).
]]
local work_key = KEYS[1]
local stats_key = KEYS[2]
local ring_key = KEYS[3]
local parked_key = KEYS[4]
local tag = ARGV[1]
local sample = tonumber(ARGV[2])

-- XINFO replies are flat {name, value, ...} lists.
local function field_of(flat, name)
  for i = 1, #flat - 1, 2 do
    if flat[i] == name then
      return flat[i + 1]
    end
  end
  return nil
end

-- The tenants with tasks waiting in their queues: how many, and up to `sample` of
-- them with their queue's length and the age of its head (its oldest task). The
-- ring's lowest passes come first (the next to be served), then the parked ones.
-- A member names a key after this partition's tag, so even a foreign member
-- could only name a key of this slot.
local function tenant_queues()
  local waiting = {redis.call('ZCARD', ring_key), redis.call('ZCARD', parked_key),
    redis.call('ZCOUNT', tag .. KEY_WAITING, '(' .. int_text(now_ms()), '+inf')}
  local queues = {}
  local budget = sample
  for i, set_key in ipairs({ring_key, parked_key}) do
    if budget > 0 and waiting[i] > 0 then
      local members = redis.call('ZRANGE', set_key, 0, budget - 1)
      budget = budget - #members
      for _, tenant in ipairs(members) do
        local queue_key = tag .. KEY_QUEUE .. tenant
        local head = redis.call('LINDEX', queue_key, 0)
        local created = false
        if head and is_task_id(head) then
          created = hmget(record_key(tag, head), 'ca')[1]
        end
        table.insert(queues, tenant)
        table.insert(queues, redis.call('LLEN', queue_key))
        table.insert(queues, created or '')
        table.insert(queues, i == 2 and '1' or '0')
      end
    end
  end
  return waiting, queues
end

-- A task's lease row, as `leases` lists them: its record's lease fields after the
-- entry's (entry_id, consumer, idle_ms, deliveries, task_id).
local function lease_row(leases, entry_id, consumer, idle, deliveries, task_id)
  local t = {false, false, false, false, false, false}
  -- Only a well-formed task ID may become part of a key name.
  if is_task_id(task_id) then
    t = hmget(record_key(tag, task_id), 'st', 'lo', 'ld', 'fn', 'at', 'tn')
  else
    task_id = ''
  end
  table.insert(leases, entry_id)
  table.insert(leases, consumer or t[2] or '')
  table.insert(leases, idle)
  table.insert(leases, deliveries or t[5] or 0)
  table.insert(leases, task_id)
  for i = 1, 6 do
    table.insert(leases, t[i] or '')
  end
end

-- The direct claims' leases (no work entry: the partition's lease set), soonest
-- deadline first, after the stream's up to `sample` rows in all: their owner is
-- the record's, their idle time 0 (an entry's idle time is what they lack), their
-- deliveries the record's attempts.
-- Each sampled one counts for its owner in `consumers` (a consumer of the group
-- has its pending entries and these; an owner with none there is listed, idle 0).
local function direct_leases(leases, direct, consumers)
  local room = sample - #leases / 11
  if direct == 0 or room <= 0 then
    return
  end
  local at = {}
  for i = 1, #consumers, 3 do
    at[consumers[i]] = i
  end
  for _, task_id in ipairs(redis.call('ZRANGE', tag .. KEY_LEASES, 0, room - 1)) do
    lease_row(leases, DIRECT_ENTRY, nil, 0, nil, task_id)
    local owner = leases[#leases - 9]
    if owner ~= '' then
      local i = at[owner]
      if i then
        consumers[i + 1] = consumers[i + 1] + 1
      elseif #consumers < 3 * sample then
        at[owner] = #consumers + 1
        table.insert(consumers, owner)
        table.insert(consumers, 1)
        table.insert(consumers, 0)
      end
    end
  end
end

local now = now_ms()
local stats = redis.call('HGETALL', stats_key)
local waiting, queues = tenant_queues()
local direct = redis.call('ZCARD', tag .. KEY_LEASES)
local leases = {}
local consumers = {}
if redis.call('EXISTS', work_key) == 0 then
  direct_leases(leases, direct, consumers)
  return {RC_OK, now, direct, direct, '', '', consumers, leases, stats, waiting, queues}
end
local length = redis.call('XLEN', work_key)
local delivered = nil
for _, group in ipairs(redis.call('XINFO', 'GROUPS', work_key)) do
  if field_of(group, 'name') == WORK_GROUP then
    delivered = field_of(group, 'last-delivered-id')
  end
end

-- Without the group nothing was delivered: every entry waits.
local first_waiting = redis.call('XRANGE', work_key, delivered and ('(' .. delivered) or '-',
  '+', 'COUNT', 1)
local oldest_waiting = first_waiting[1] and first_waiting[1][1] or ''
if not delivered then
  direct_leases(leases, direct, consumers)
  return {RC_OK, now, length + direct, direct, oldest_waiting, '', consumers, leases, stats,
    waiting, queues}
end

local summary = redis.call('XPENDING', work_key, WORK_GROUP)
local pending = summary[1]
local oldest_pending = summary[2] or ''

for i, consumer in ipairs(redis.call('XINFO', 'CONSUMERS', work_key, WORK_GROUP)) do
  if i > sample then
    break
  end
  table.insert(consumers, field_of(consumer, 'name'))
  table.insert(consumers, field_of(consumer, 'pending'))
  table.insert(consumers, field_of(consumer, 'idle'))
end

if pending > 0 and sample > 0 then
  for _, p in ipairs(redis.call('XPENDING', work_key, WORK_GROUP, '-', '+', sample)) do
    local entry_id = p[1]
    local task_id = ''
    local found = redis.call('XRANGE', work_key, entry_id, entry_id)
    if found[1] then
      local fields = found[1][2]
      for i = 1, #fields - 1, 2 do
        if fields[i] == 't' then
          task_id = fields[i + 1]
        end
      end
    end
    lease_row(leases, entry_id, p[2], p[3], p[4], task_id)
  end
end
direct_leases(leases, direct, consumers)
return {RC_OK, now, length + direct, pending + direct, oldest_waiting, oldest_pending, consumers,
  leases, stats, waiting, queues}
