-- Parked tasks: a task whose handler waits for its client's input, given back by
-- its worker (park.lua) so that a person thinking holds no worker slot, no lease
-- and no handler. While parked the task is `input_required` as before, its record
-- says so (`pw`), and it is in two sorted sets scored by its expiry: its
-- partition's (KEY_WAITING, what `inspect` and the gauge count) and its tenant's
-- (KEY_WAITING_TENANT, what `redis-tasks tenants` counts). Scored by expiry, a
-- parked task that expires stops counting by itself, as the open sets do. The
-- answer that completes its round resumes it (resume_task, from update.lua): it
-- goes back to the head of its tenant's queue, since it has waited already.
-- Includes: common, keys, work, tenants

-- The partition's and the tenant's sets of parked tasks, for the partition tagged
-- `tag`.
local function waiting_keys(tag, tenant)
  return tag .. KEY_WAITING, tag .. KEY_WAITING_TENANT .. tenant
end

-- Count `task_id` (of `tenant`, expiring at `expire_at`: the record's `ex`, or
-- nil for never) among the parked tasks. Expired members go first, so the sets
-- hold no more than the parked tasks alive and those expiring before the next park.
local function add_waiting(tag, tenant, task_id, expire_at, now)
  local score = expire_at or '+inf'
  local stale = int_text(now)
  for _, key in ipairs({waiting_keys(tag, tenant)}) do
    redis.call('ZREMRANGEBYSCORE', key, '-inf', stale)
    redis.call('ZADD', key, score, task_id)
    expire_with_last(key)
  end
end

-- `task_id` no longer counts among the parked tasks (resumed, or ended).
local function forget_waiting(tag, tenant, task_id)
  local partition_key, tenant_key = waiting_keys(tag, tenant)
  redis.call('ZREM', partition_key, task_id)
  redis.call('ZREM', tenant_key, task_id)
end

-- The task `task_id` of `tenant`, queued again at the head of the tenant's queue
-- (a resumed task has waited already: it goes before the tenant's other tasks,
-- and takes its tenant's turns like any of them), or straight into the stream as a
-- new task would go (nothing waits in the partition, or `fair` is off). A tenant
-- that was not waiting joins the ring as enqueue joins it, and is signalled as a
-- newcomer's where others wait (busy workers start it at their next free slot); its
-- weight is the one kept while it waits, else the default (its cap comes from the
-- record, `cap`, as a deferred claim's does).
-- keys: {task, work, stats, signals} of the task's partition
-- call: {event_opts}
local function enqueue_first(tag, keys, tenant, cap, task_id, expire_at, fair, call)
  if not fair then
    add_work(keys.work, task_id, keys.task)
    return
  end
  local queue_key, ring_key = tag .. KEY_QUEUE .. tenant, tag .. KEY_RING
  local pushed = redis.call('LPUSH', queue_key, task_id)
  if pushed == 1 and not redis.call('ZSCORE', tag .. KEY_PARKED, tenant) then
    -- The tenant was not waiting: it is in neither the ring nor the parked set.
    local others = redis.call('EXISTS', ring_key) == 1
    if others then
      forget_gone_head(tag, keys.stats)
      others = redis.call('EXISTS', ring_key) == 1
    end
    if not others and not undelivered(keys.work) then
      redis.call('DEL', queue_key)
      add_work(keys.work, task_id, keys.task)
      if redis.call('EXISTS', tag .. KEY_BUSY) == 1 then
        emit(keys.signals, call.event_opts, SIGNAL_NEWCOMER .. task_id)
      end
      return
    end
    local tenants_key = tag .. KEY_TENANTS
    local settings = redis.call('HGET', tenants_key, tenant)
    if not settings and cap then
      settings = '1 ' .. cap
      redis.call('HSET', tenants_key, tenant, settings)
    end
    join_ring(tag, tenant, (tenant_settings(settings or nil)))
    if others then
      emit(keys.signals, call.event_opts, SIGNAL_NEWCOMER .. task_id)
    end
  end
  queue_lives_to(queue_key, pushed, tonumber(expire_at) or 0)
  redis.call('HINCRBY', keys.stats, STATS_QUEUED, 1)
end

-- A parked task whose round its client just completed goes back to work: no longer
-- parked, queued again (enqueue_first). The caller wrote its status (working).
-- t: the record as read, with `tn`, `tc` and `ex`
-- keys, call: as enqueue_first's
local function resume_task(keys, task_id, t, fair, call)
  local tag = tag_of(keys.task, task_id)
  redis.call('HDEL', keys.task, 'pw')
  if not t.tn then
    -- Every task is created with its tenant (`tn`); one without is not a parked one
    -- this code made, and goes back as a task of no tenant would.
    add_work(keys.work, task_id, keys.task)
    return
  end
  forget_waiting(tag, t.tn, task_id)
  enqueue_first(tag, keys, t.tn, t.tc, task_id, t.ex, fair, call)
end
