-- create_task(), the admission, store and enqueue of one new task, for create.
-- Includes: common, tenants

-- Admit, store and enqueue one task, as the first of a call or after the others:
-- nothing it does depends on whether others came in the same call.
-- Admission first, with reads only, so a refused create stores nothing but the
-- counts of its refusal (the partition's stats and the tenant's own, best
-- effort): the tenant's open-task quota (its open set: task IDs scored by expiry,
-- so a task that expires stops counting by itself), then its create rate (GCRA:
-- the theoretical arrival time, in us). The first write is RPUSH or XADD, both
-- refused by a Redis out of memory (noeviction), so a full Redis refuses the
-- create whole (Redis lets a script that has written once go on writing past
-- maxmemory). The work goes straight into the stream when nothing waits in the
-- partition (tenants.lua's enqueue), so an idle worker's blocked read wakes at
-- once; else to the tail of the tenant's queue, dispatched fairly by claim_next.
-- A tenant that was not waiting joins the ring near its head, and the task's ID
-- goes to the signal stream too (marked a newcomer's), as does a task that went
-- straight into the stream of a partition a saturated worker serves: busy workers,
-- whose read loops wait for a free slot rather than read, give this partition
-- their next free slot (the tenant most behind starts next, whichever partition
-- it landed in). A tenant queue
-- lives as long as its last task. A tenant with a quota, a rate or a cap has all
-- its tasks in its home partition (the caller chose the ID), so these keys see all
-- of them. A named or limited plan's terms are kept for operators, and the tenant
-- marked seen (redis-tasks tenants reads both).
-- A retry of a create whose reply was lost finds its own task (same binding and
-- origin) and answers RC_OK without a second task, before any admission. The
-- record keeps the binding's digest only (`bd`), never the endpoint or partition
-- key, and the tenant's digest (`tn`), never its key. The trace context (`tp`)
-- lives while the task does: claims return it (the worker's span links to it)
-- and the terminal transition drops it, like `pl`.
-- Returns the reply create answers for it: {RC_OK, created_ms}, {RC_EXISTS},
-- {RC_QUOTA} or {RC_RATE, retry_after_ms}.
-- k: {work, events, stats, ring, tenants, signals, seen}: the partition's keys of
--   create.lua's header by those names, its `tag`, and the tenant's `queue` (a
--   call's creates of one tenant share one such table); the tenant's other keys
--   (KEY_OPEN, KEY_RATE, KEY_PLAN, KEY_REFUSED after the tag) are made here for a
--   tenant that needs them
-- call: what the script call shares: {us, now, now_text (int_text(now)), expiries
--   (TTL -> expiry as text, filled here), event_opts, fair (fair dispatch), creates},
--   creates being {created, queued, queues}: the IDs of the tasks created and the
--   queued tasks and their queues' expiries, which create writes once for them all
--   (see enqueue's `batch`)
-- c: this create's arguments by name (create.lua's `creates` group, `limits`
--   taken apart): {task_key, grant_key (its record and grant keys), task_id,
--   binding, origin, payload, ttl_ms, poll_ms, metadata, trace_context, tenant,
--   settings, cap, max_open, rate_us, burst_us, terms}, all text as the call gave
--   them
local function create_task(k, call, c)
  local task_key, tenant = c.task_key, c.tenant
  -- EXISTS first: a new ID (nearly every create) costs no reply table; the
  -- record is read only for a retry or an ID taken.
  if redis.call('EXISTS', task_key) == 1 then
    local existing = read_record(task_key, 'bd', 'or', 'ca')
    if existing.bd == c.binding and existing['or'] == c.origin then
      confirm_state(task_key, 'bd', c.binding)
      return {RC_OK, tonumber(existing.ca)}
    end
    return {RC_EXISTS}
  end

  local us, now = call.us, call.now
  -- Compared as text first: most tenants have neither, and tonumber is a strtod.
  local max_open = c.max_open ~= '0' and tonumber(c.max_open) or 0
  local rate_us = c.rate_us ~= '0' and tonumber(c.rate_us) or 0
  -- The tenant's limit keys, made only for a tenant with that limit.
  local open_key = max_open > 0 and k.tag .. KEY_OPEN .. tenant
  local rate_key = rate_us > 0 and k.tag .. KEY_RATE .. tenant
  local refusal = nil
  if max_open > 0 and redis.call('ZCOUNT', open_key, '(' .. int_text(now), '+inf') >= max_open then
    refusal = {STATS_REFUSED_QUOTA, 'quota', {RC_QUOTA}}
  end
  local arrival = 0
  if rate_us > 0 and not refusal then
    arrival = math.max(tonumber(redis.call('GET', rate_key)) or 0, us)
    local early = arrival - us - tonumber(c.burst_us)
    if early > 0 then
      refusal = {STATS_REFUSED_RATE, 'rate', {RC_RATE, int_text(math.ceil(early / 1000))}}
    end
  end
  -- A tenant seen (a plan kept, or a refusal) enters the partition's index that
  -- redis-tasks tenants reads; one not seen for a day leaves it when a new one comes.
  if refusal then
    -- Counted for the partition and for the tenant (the tenant's counts last a day
    -- from its latest refusal), best effort: nothing else is stored.
    local refused_key = k.tag .. KEY_REFUSED .. tenant
    redis.pcall('HINCRBY', k.stats, refusal[1], 1)
    redis.pcall('HINCRBY', refused_key, refusal[2], 1)
    redis.pcall('PEXPIREAT', refused_key, int_text(now + REFUSALS_KEPT_MS))
    if redis.pcall('ZADD', k.seen, int_text(now), tenant) == 1 then
      redis.pcall('ZREMRANGEBYSCORE', k.seen, '-inf', int_text(now - REFUSALS_KEPT_MS))
    end
    return refusal[3]
  end

  local ttl_ms = tonumber(c.ttl_ms)
  local expire_at = ttl_ms > 0 and now + ttl_ms or 0
  local queue_keys = k.queue_keys
  if not queue_keys then  -- made once for a batch's creates of one tenant
    queue_keys = {k.ring, k.tenants, k.queue}
    k.queue_keys = queue_keys
  end
  -- No `ua` (it reads as `ca` until the first update) and no `fn` (it reads as
  -- 0 until the first claim): every byte of a record is kept for its retention.
  local fields = {
    'st', ST_WORKING, 'ca', call.now_text, 'ttl', c.ttl_ms, 'pi', c.poll_ms, 'bd', c.binding,
    'tn', tenant,
  }
  -- The first write: its work entry (whose ID joins `fields` as `wk`) or its place
  -- in its tenant's queue.
  local _, newcomer = enqueue(queue_keys, k.work, k.stats, tenant, c.settings, c.task_id,
    call.fair, expire_at, call.creates, fields)
  add_field(fields, 'or', c.origin)
  -- Absent when empty (the claim reads it as ''): one field fewer for every
  -- command that meets the record while it lives.
  if c.payload ~= '' then
    add_field(fields, 'pl', c.payload)
  end
  if c.metadata ~= '' then
    add_field(fields, 'md', c.metadata)
  end
  -- Absent unless a span was recorded: an untraced task keeps no byte for it.
  if c.trace_context ~= '' then
    add_field(fields, 'tp', c.trace_context)
  end
  if ttl_ms > 0 then
    -- A batch's tasks mostly share their TTL, and so their expiry: made once.
    local expiry = call.expiries[ttl_ms]
    if not expiry then
      expiry = int_text(expire_at)
      call.expiries[ttl_ms] = expiry
    end
    fields[#fields + 1] = 'ex'
    fields[#fields + 1] = expiry
  end
  if max_open > 0 then
    fields[#fields + 1] = 'oq'
    fields[#fields + 1] = '1'
  end
  if c.cap ~= '0' then
    fields[#fields + 1] = 'tc'
    fields[#fields + 1] = c.cap
  end
  redis.call('HSET', task_key, unpack(fields))
  if ttl_ms > 0 then
    redis.call('PEXPIREAT', task_key, expire_at)
    -- A string holding a shared integer: the smallest key Redis keeps.
    redis.call('SET', c.grant_key, '1', 'PXAT', expire_at)
  else
    redis.call('SET', c.grant_key, '1')
  end
  if max_open > 0 then
    redis.call('ZREMRANGEBYSCORE', open_key, '-inf', int_text(now))
    redis.call('ZADD', open_key, ttl_ms > 0 and int_text(expire_at) or '+inf', c.task_id)
    expire_with_last(open_key)
  end
  if rate_us > 0 then
    -- Kept until the bucket is full again: then it holds nothing a GET would not assume.
    local next_arrival = arrival + rate_us
    redis.call('SET', rate_key, int_text(next_arrival), 'PXAT',
      int_text(math.ceil(next_arrival / 1000)))
  end
  if c.terms ~= '' then
    local plan_key = k.tag .. KEY_PLAN .. tenant
    if ttl_ms > 0 then
      redis.call('SET', plan_key, c.terms, 'PXAT', int_text(expire_at))
    else
      redis.call('SET', plan_key, c.terms)
    end
    if redis.call('ZADD', k.seen, int_text(now), tenant) == 1 then
      redis.call('ZREMRANGEBYSCORE', k.seen, '-inf', int_text(now - REFUSALS_KEPT_MS))
    end
  end
  local created = call.creates.created
  created[#created + 1] = c.task_id
  if newcomer then
    emit(k.signals, call.event_opts, SIGNAL_NEWCOMER .. c.task_id)
  end
  return {RC_OK, now}
end
