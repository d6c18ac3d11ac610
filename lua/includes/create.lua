-- create_task(), the admission, store and enqueue of one new task, for create and
-- create_batch (which creates each of its tasks exactly as create would, one by one).
-- Includes: common, tenants

-- Admit, store and enqueue one task (see create.lua's header for what each step
-- does and why in this order). The caller has checked nothing; the clock is the
-- call's. Returns the reply create answers for it: {RC_OK, created_ms},
-- {RC_EXISTS}, {RC_QUOTA} or {RC_RATE, retry_after_ms}; and whether it created
-- the task (a retry of a create whose reply was lost answers RC_OK and does not).
-- task_key, grant_key: the task's record and grant keys
-- k: {work, events, stats, ring, tenants, queue, open, rate, signals, plan, refused,
--   seen}, the partition's and the tenant's keys of create.lua's header, by those
--   names (a batch's creates of one tenant share one such table)
-- task_id ... terms: create.lua's ARGV 1 to 7 and 9 to 17 (all but event_opts), in
--   that order: positional, since a table of them cost a batch's create 3 %
-- call: what the script call shares: {us, now, now_text (int_text(now)), expiries
--   (TTL -> expiry as text, filled here), event_opts, batch}; batch is nil
--   (this call emits the task's event and counts it) or create_batch's {created,
--   queued}: the IDs of the tasks it created and the queued count, which that
--   script emits and counts once for them all (see enqueue's `batch`).
local function create_task(task_key, grant_key, k, call, task_id, binding, origin, payload,
                           ttl_ms_text, poll_ms, metadata, trace_context, tenant, settings, cap,
                           max_open_text, rate_us_text, burst_us, fair, terms)
  -- EXISTS first: a new ID (nearly every create) costs no reply table; the
  -- record is read only for a retry or an ID taken.
  if redis.call('EXISTS', task_key) == 1 then
    local existing = hmget(task_key, 'bd', 'or', 'ca')
    if existing[1] == binding and existing[2] == origin then
      return {RC_OK, tonumber(existing[3])}, false
    end
    return {RC_EXISTS}, false
  end

  local us, now = call.us, call.now
    -- Compared as text first: most tenants have neither, and tonumber is a strtod.
  local max_open = max_open_text ~= '0' and tonumber(max_open_text) or 0
  local rate_us = rate_us_text ~= '0' and tonumber(rate_us_text) or 0
  local refusal = nil
  if max_open > 0 and redis.call('ZCOUNT', k.open, '(' .. int_text(now), '+inf') >= max_open then
    refusal = {STATS_REFUSED_QUOTA, 'quota', {RC_QUOTA}}
  end
  local arrival = 0
  if rate_us > 0 and not refusal then
    arrival = math.max(tonumber(redis.call('GET', k.rate)) or 0, us)
    local early = arrival - us - tonumber(burst_us)
    if early > 0 then
      refusal = {STATS_REFUSED_RATE, 'rate', {RC_RATE, int_text(math.ceil(early / 1000))}}
    end
  end
  -- A tenant seen (a plan kept, or a refusal) enters the partition's index that
  -- redis-tasks tenants reads; one not seen for a day leaves it when a new one comes.
  if refusal then
    -- Counted for the partition and for the tenant (the tenant's counts last a day
    -- from its latest refusal), best effort: nothing else is stored.
    redis.pcall('HINCRBY', k.stats, refusal[1], 1)
    redis.pcall('HINCRBY', k.refused, refusal[2], 1)
    redis.pcall('PEXPIREAT', k.refused, int_text(now + REFUSALS_KEPT_MS))
    if redis.pcall('ZADD', k.seen, int_text(now), tenant) == 1 then
      redis.pcall('ZREMRANGEBYSCORE', k.seen, '-inf', int_text(now - REFUSALS_KEPT_MS))
    end
    return refusal[3], false
  end

  local ttl_ms = tonumber(ttl_ms_text)
  local expire_at = ttl_ms > 0 and now + ttl_ms or 0
  local queue_keys = k.queue_keys
  if not queue_keys then  -- made once for a batch's creates of one tenant
    queue_keys = {k.ring, k.tenants, k.queue}
    k.queue_keys = queue_keys
  end
  local entry, newcomer = enqueue(queue_keys, k.work, k.stats, tenant,
    settings, task_id, fair == '1', expire_at, call.batch)
  -- No `ua` (it reads as `ca` until the first update) and no `fn` (it reads as
  -- 0 until the first claim): every byte of a record is kept for its retention.
  local fields = {
    'st', ST_WORKING, 'ca', call.now_text, 'ttl', ttl_ms_text, 'pi', poll_ms, 'bd', binding,
    'tn', tenant,
  }
  if entry then
    fields[#fields + 1] = 'wk'
    fields[#fields + 1] = entry
  end
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
  if cap ~= '0' then
    fields[#fields + 1] = 'tc'
    fields[#fields + 1] = cap
  end
  redis.call('HSET', task_key, unpack(fields))
  if ttl_ms > 0 then
    redis.call('PEXPIREAT', task_key, expire_at)
    -- A string holding a shared integer: the smallest key Redis keeps.
    redis.call('SET', grant_key, '1', 'PXAT', expire_at)
  else
    redis.call('SET', grant_key, '1')
  end
  if max_open > 0 then
    redis.call('ZREMRANGEBYSCORE', k.open, '-inf', int_text(now))
    redis.call('ZADD', k.open, ttl_ms > 0 and int_text(expire_at) or '+inf', task_id)
    expire_with_last(k.open)
  end
  if rate_us > 0 then
    -- Kept until the bucket is full again: then it holds nothing a GET would not assume.
    local next_arrival = arrival + rate_us
    redis.call('SET', k.rate, int_text(next_arrival), 'PXAT',
      int_text(math.ceil(next_arrival / 1000)))
  end
  if terms ~= '' then
    if ttl_ms > 0 then
      redis.call('SET', k.plan, terms, 'PXAT', int_text(expire_at))
    else
      redis.call('SET', k.plan, terms)
    end
    if redis.call('ZADD', k.seen, int_text(now), tenant) == 1 then
      redis.call('ZREMRANGEBYSCORE', k.seen, '-inf', int_text(now - REFUSALS_KEPT_MS))
    end
  end
  local batch = call.batch
  if batch then
    batch.created[#batch.created + 1] = task_id
  else
    redis.call('HINCRBY', k.stats, STATS_CREATED, 1)
    emit(k.events, call.event_opts, task_id)
  end
  if newcomer then
    emit(k.signals, call.event_opts, task_id)
  end
  return {RC_OK, now}, true
end
