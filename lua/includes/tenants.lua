-- Tenant queues and fair dispatch (redis_tasks/_tenancy.py tells the design).
-- A task that cannot go straight to an idle worker waits in its tenant's queue
-- (a list per tenant and partition, KEY_QUEUE); the tenants with tasks waiting
-- form the partition's ring (a sorted set, KEY_RING) scored by their *pass*:
-- each task dispatched adds STRIDE_UNIT / weight to its tenant's pass, and the
-- next task comes from the lowest pass (stride scheduling), so tenants are served
-- in weighted round-robin and each tenant's tasks in arrival order. A tenant that
-- starts waiting joins at the partition's virtual time (the pass the last task
-- served started at) plus a jitter below its stride, as start-time fair queuing
-- does: it is served within one round, and since a tenant's pass is forgotten once
-- it stops waiting, none can be banked. A tenant at its concurrency cap leaves the
-- ring for the parked set (KEY_PARKED, scored by when to look again); its waiting
-- tasks hold nobody back. A waiting tenant's weight and cap, when not the
-- defaults, and the virtual time (VTIME_FIELD) are kept in the tenants hash
-- (KEY_TENANTS). A tenant that joins a ring where others wait is a newcomer: its
-- create signals its task, which a busy worker starts ahead of the ring's order
-- (dispatch_first). A queue expires with its last task, so none outlives its tasks
-- while no worker runs; a tenant found without one leaves the ring.
-- Includes: common, keys, work

-- Where `tenant` lands when it joins the ring of partition `partition` (its
-- number, as text): in [0, `stride`) past the partition's virtual time. A hash of
-- the tenant (polynomial, then mixed by squaring modulo a prime below 2^26, so
-- every product stays exact in a double; sha1hex is not in every server a script
-- meets) gives it a place in [0, 1), which each partition turns by the golden
-- ratio: tenants that join together are served in a different order in each
-- partition, and each tenant is early in about as many partitions as late (one
-- order everywhere would serve a tenant in every partition before the next
-- anywhere; independent orders would still favour some by chance).
-- redis_tasks/_tenancy.py's jitter() is its twin.
local function jitter(tenant, partition, stride)
  local h = 0
  for i = 1, #tenant do
    h = (h * 31 + string.byte(tenant, i)) % JITTER_PRIME
  end
  for _ = 1, 3 do
    h = (h * h + JITTER_SALT) % JITTER_PRIME
  end
  return math.floor(((h / JITTER_PRIME + tonumber(partition) * GOLDEN) % 1) * stride)
end

-- A tenant's weight and concurrency cap from its settings ("<weight> <cap>";
-- none: weight 1, no cap).
local function tenant_settings(text)
  if not text then
    return 1, 0
  end
  local weight, cap = string.match(text, '^(%d+) (%d+)$')
  return tonumber(weight) or 1, tonumber(cap) or 0
end

-- How far one dispatch moves a tenant of `weight`.
local function stride_of(weight)
  return math.floor(STRIDE_UNIT / weight)
end

-- Put `tenant` (of `weight`) in the ring of the partition tagged `tag`, at the
-- partition's virtual time plus its jitter.
local function join_ring(tag, tenant, weight)
  local now = tonumber(redis.call('HGET', tag .. KEY_TENANTS, VTIME_FIELD)) or 0
  local pass = now + jitter(tenant, tag_partition(tag), stride_of(weight))
  redis.call('ZADD', tag .. KEY_RING, int_text(pass), tenant)
end

-- How many of a capped tenant's tasks hold a live lease: its run set is scored by
-- lease deadline, so a lease that ran out (a worker that died) stops counting by
-- itself, no sweeper needed.
local function running(run_key, now)
  return redis.call('ZCOUNT', run_key, '(' .. int_text(now), '+inf')
end

-- Expire a tenant's sorted set (run or open) with its last member: the set goes
-- when nothing in it counts any more.
local function expire_with_last(key)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]
  if last == SCORE_INF then  -- a task kept forever: so is the set
    redis.call('PERSIST', key)
  elseif last then
    redis.call('PEXPIREAT', key, int_text(tonumber(last) + 1))
  end
end

-- A tenant queue lives as long as the last of its tasks (nothing else removes it
-- while no worker runs): `pushed` is what the RPUSH or LPUSH of a task that
-- expires at `expire_at` (ms; 0: never) answered. A new list gets that expiry;
-- a longer one's moves only later (GT); an unlimited task keeps it forever.
local function queue_lives_to(queue_key, pushed, expire_at)
  if expire_at == 0 then
    redis.call('PERSIST', queue_key)
  elseif pushed == 1 then
    redis.call('PEXPIREAT', queue_key, int_text(expire_at))
  else
    redis.call('PEXPIREAT', queue_key, int_text(expire_at), 'GT')
  end
end

-- A batch's task queued in `queue_key` (what its RPUSH answered: `pushed`; its
-- expiry: `expire_at`): counted, and its queue's expiry gathered, as queue_lives_to
-- would have set it task by task: a list new in this batch gets its expiry set, an
-- older one's moves only later, and one task kept forever keeps the list.
local function queue_batch(batch, queue_key, pushed, expire_at)
  batch.queued = batch.queued + 1
  local queue = batch.queues[queue_key]
  if not queue then
    queue = {key = queue_key, fresh = pushed == 1, expire_at = expire_at}
    batch.queues[queue_key] = queue
    batch.queues[#batch.queues + 1] = queue
  elseif queue.expire_at ~= 0 then
    queue.expire_at = expire_at ~= 0 and math.max(queue.expire_at, expire_at) or 0
  end
end

-- What queue_batch gathered, written: one expiry a queue and one count for all.
local function queues_live(batch, stats_key)
  for _, queue in ipairs(batch.queues) do
    queue_lives_to(queue.key, queue.fresh and 1 or 2, queue.expire_at)
  end
  if batch.queued > 0 then
    redis.call('HINCRBY', stats_key, STATS_QUEUED, batch.queued)
  end
end

-- The ring's first tenant, when its queue is gone (every task of it expired while
-- no worker dispatched, and the list with them): out of the ring and the tenants
-- hash, so those stay bounded by the tenants waiting with workers down too. When
-- nothing waits any more, the stats' queued count is what it must be: 0 (the
-- expired tasks' IDs went without a dispatch to count them out).
local function forget_gone_head(tag, stats_key)
  local ring_key = tag .. KEY_RING
  local head = redis.call('ZRANGE', ring_key, 0, 0)[1]
  if head and redis.call('EXISTS', tag .. KEY_QUEUE .. head) == 0 then
    redis.call('ZREM', ring_key, head)
    redis.call('HDEL', tag .. KEY_TENANTS, head)
    if redis.call('EXISTS', ring_key) == 0 and redis.call('EXISTS', tag .. KEY_PARKED) == 0 then
      redis.call('HSET', stats_key, STATS_QUEUED, 0)
    end
  end
end

-- Out of the ring into the parked set: `tenant` is at its cap. It is looked at
-- again when one of its running tasks ends (release_tenant_slot) or at its
-- soonest lease deadline, should that task's worker die. `claiming`: the lease
-- deadline of the claims this script is about to make of the tenant's tasks
-- (dispatch parks a tenant whose room its picks fill before they are claimed), its
-- score while no lease of the tenant is live yet; scored `now`, the next dispatch
-- unparked it at once, to find it at its cap and park it again.
local function park(tag, tenant, run_key, now, claiming)
  local soonest = redis.call('ZRANGEBYSCORE', run_key, '(' .. int_text(now), '+inf',
    'WITHSCORES', 'LIMIT', 0, 1)
  redis.call('ZREM', tag .. KEY_RING, tenant)
  redis.call('ZADD', tag .. KEY_PARKED, int_text(tonumber(soonest[2]) or claiming or now), tenant)
end

-- Back from the parked set into the ring, if `tenant` is parked; whether it was.
local function unpark(tag, tenant)
  if redis.call('ZREM', tag .. KEY_PARKED, tenant) == 0 then
    return false
  end
  join_ring(tag, tenant, tenant_settings(redis.call('HGET', tag .. KEY_TENANTS, tenant) or nil))
  return true
end

-- The work group's last delivered ID (nil: none yet, or no group), from XINFO GROUPS.
local function last_delivered(work_key)
  local groups = redis.pcall('XINFO', 'GROUPS', work_key)
  if groups.err then
    return nil
  end
  for _, group in ipairs(groups) do
    local name, last = nil, nil
    for i = 1, #group - 1, 2 do
      local field = group[i]
      if field == 'name' then
        name = group[i + 1]
      elseif field == 'last-delivered-id' then
        last = group[i + 1]
      end
    end
    if name == WORK_GROUP then
      return last
    end
  end
  return nil
end

-- Whether the work stream holds an entry no consumer was given yet (one a blocked
-- reader would get at once: past the group's last delivered ID).
local function undelivered(work_key)
  if redis.call('XLEN', work_key) == 0 then
    return false
  end
  local delivered = last_delivered(work_key)
  -- No group yet: nothing was delivered.
  local from = delivered and '(' .. delivered or '-'
  return #redis.call('XRANGE', work_key, from, '+', 'COUNT', 1) > 0
end

-- The work of a new task `task_id` of `tenant`: whether it went straight into the
-- work stream (nothing waits: no tenant in the ring, no entry undelivered, so a
-- worker blocked on the stream, if any, gets it now; or `fair` is off: then its
-- entry ID is appended to `record`, the fields create writes, as add_work does),
-- else it joined the tail of its tenant's queue; then a second value, true when
-- busy workers should start the task at their next free slot (claim_next's
-- `first`), as a *newcomer*'s: the tenant was not waiting and joined a ring where
-- others wait (near the ring's head: it starts at the virtual time), or its task
-- went straight into the stream of a partition a saturated worker serves (KEY_BUSY,
-- which such a worker keeps: none of its read loops blocks on the stream, and the
-- partition's loop waited its turn among all the partitions for a free slot; 0.37
-- to 0.78 s behind 500 ms tools, where its ring had drained before the others).
-- `settings` is the tenant's "<weight> <cap>", or '' for the defaults;
-- `expire_at` the task's expiry (ms; 0: never), which its queue lives to. The
-- first write is RPUSH or XADD, which a full Redis refuses.
-- keys: {ring, tenants, queue} of the task's partition
-- batch: create's {queued, queues}: the queued count and each queue's expiry are
--   gathered there (queue_batch) and written once for the whole call
--   (queues_live), not per task.
local function enqueue(keys, work_key, stats_key, tenant, settings, task_id, fair, expire_at,
                       batch, record)
  local ring_key, tenants_key, queue_key = keys[1], keys[2], keys[3]
  if not fair then
    add_work(work_key, task_id, record)
    return true, false
  end
  local newcomer = false
  local pushed = redis.call('RPUSH', queue_key, task_id)
  if pushed == 1 then
    -- The tenant was not waiting: it is in neither the ring nor the parked set.
    local tag = string.sub(ring_key, 1, #ring_key - #KEY_RING)
    local others = redis.call('EXISTS', ring_key) == 1
    if others then
      forget_gone_head(tag, stats_key)
      others = redis.call('EXISTS', ring_key) == 1
    end
    if not others and not undelivered(work_key) then
      redis.call('DEL', queue_key)
      add_work(work_key, task_id, record)
      return true, redis.call('EXISTS', tag .. KEY_BUSY) == 1
    end
    join_ring(tag, tenant, (tenant_settings(settings ~= '' and settings or nil)))
    newcomer = others
    if settings == '' then
      redis.call('HDEL', tenants_key, tenant)
    end
  end
  if settings ~= '' then
    redis.call('HSET', tenants_key, tenant, settings)
  end
  queue_batch(batch, queue_key, pushed, expire_at)
  return false, newcomer
end

-- Take the task `task_id` out of its tenant's queue in the partition tagged `tag`:
-- it ended before any worker dispatched it. LREM walks the list from its head
-- (a queue of 10,000: see benchmarks/README.md); the tenant leaves the ring (or
-- the parked set) when its queue empties. Whether the task was there.
local function unqueue(tag, tenant, task_id, stats_key)
  local queue_key = tag .. KEY_QUEUE .. tenant
  if redis.call('LREM', queue_key, 1, task_id) == 0 then
    return false
  end
  redis.call('HINCRBY', stats_key, STATS_QUEUED, -1)
  if redis.call('EXISTS', queue_key) == 0 then
    redis.call('ZREM', tag .. KEY_RING, tenant)
    redis.call('ZREM', tag .. KEY_PARKED, tenant)
    redis.call('HDEL', tag .. KEY_TENANTS, tenant)
  end
  return true
end

-- A running task of a capped tenant ended or was handed back: its lease no longer
-- counts, and a parked tenant may run another, so the call rings a doorbell at
-- its end (call.doorbell: see ring_due): a worker blocked on the stream wakes and
-- dispatches that task. (A task that ended waiting in its tenant's queue held no
-- running place: its tenant, parked at its cap, stays parked; see terminate.)
local function release_tenant_slot(tag, tenant, task_id, call)
  redis.call('ZREM', tag .. KEY_RUN .. tenant, task_id)
  if unpark(tag, tenant) then
    call.doorbell = true
  end
end

-- The ring's head: the first `want` tenants in pass order that may run a task now,
-- each {name, pass, stride, room (tasks it may start: its cap's room, else `want`),
-- queued (tasks in its queue), capped}. A tenant found at its cap on the way is
-- parked (it can run nothing, and its waiting tasks must hold nobody back), and
-- the read goes on past it: a ring whose head is all at its cap still serves the
-- tenants behind them at once (read `want` at a time; each parked tenant leaves
-- the ring, so this ends). The queue's length is what plan_picks may take of it:
-- planned past it, a dispatch popped fewer tasks than planned while the turns it
-- planned for them went to nobody (a heavy tenant with one task took a batch's
-- every turn, and the light ones waiting got none).
local function runnable_head(tag, want, now)
  local ring_key, tenants_key = tag .. KEY_RING, tag .. KEY_TENANTS
  local heads = {}
  while #heads < want do
    -- The kept heads stay at ranks 0 .. #heads - 1: only parked tenants leave.
    local asked = want - #heads
    local top = redis.call('ZRANGE', ring_key, #heads, want - 1, 'WITHSCORES')
    if not top[1] then
      break
    end
    local names = {}
    for i = 1, #top - 1, 2 do
      names[#names + 1] = top[i]
    end
    -- Fewer than asked: the ring holds no more, so no second read finds any (a
    -- ring of fewer tenants than a batch wants read twice per dispatch).
    local last_read = #names < asked
    local settings = redis.call('HMGET', tenants_key, unpack(names))
    for i, name in ipairs(names) do
      local weight, cap = tenant_settings(settings[i])
      local room = want
      if cap > 0 then
        room = cap - running(tag .. KEY_RUN .. name, now)
      end
      if room > 0 then
        heads[#heads + 1] = {name = name, pass = tonumber(top[2 * i]), stride = stride_of(weight),
          room = room, queued = redis.call('LLEN', tag .. KEY_QUEUE .. name), capped = cap > 0}
      else
        park(tag, name, tag .. KEY_RUN .. name, now)
      end
    end
    if last_read then
      break
    end
  end
  return heads
end

-- How `count` dispatches fall among `heads` (runnable_head, in pass order): each
-- to the head of lowest pass with room and tasks left (a tie: the first), whose
-- pass then grows by its stride. Sets each head's picks (and its pass after them);
-- returns the pass the last pick started at (the new virtual time), or nil for
-- none. Pure, and the twin of plan_picks in redis_tasks/_tenancy.py (a shared
-- table of cases drives both). Why `count` heads are enough: every head has room
-- and a task, so a head is picked only after every head before it was, and
-- `count` picks reach at most `count` heads.
local function plan_picks(heads, count)
  for _, head in ipairs(heads) do
    head.picks = 0
  end
  local started = nil
  for _ = 1, count do
    local best = nil
    for _, head in ipairs(heads) do
      local picks = head.picks
      if picks < head.room and picks < head.queued and (not best or head.pass < best.pass) then
        best = head
      end
    end
    if not best then
      break
    end
    best.picks = best.picks + 1
    started = best.pass
    best.pass = best.pass + best.stride
  end
  return started
end

-- Take up to `count` waiting tasks from the tenant queues of the partition tagged
-- `tag`, in weighted round-robin (runnable_head, then plan_picks, then their writes
-- here), for the caller to claim in this same script with no work entry (a direct
-- claim: the claim writes `wk` and the lease set); their IDs, in order. A capped
-- tenant gets at most its cap's room, and is parked at its cap until `claiming` (the
-- deadline the caller's claims give their leases) or the end of one of its tasks.
local function dispatch(tag, stats_key, count, now, claiming)
  local ring_key, parked_key = tag .. KEY_RING, tag .. KEY_PARKED
  -- Parked tenants whose soonest lease deadline came (its worker died): look again.
  for _, tenant in ipairs(redis.call('ZRANGEBYSCORE', parked_key, '-inf', int_text(now),
      'LIMIT', 0, count)) do
    unpark(tag, tenant)
  end
  local heads = runnable_head(tag, count, now)
  local started = plan_picks(heads, count)
  if started then
    redis.call('HSET', tag .. KEY_TENANTS, VTIME_FIELD, int_text(started))
  end
  local added, left = {}, false
  for _, head in ipairs(heads) do
    local picks = head.picks
    if picks > 0 then
      for _, task_id in ipairs(redis.call('LPOP', tag .. KEY_QUEUE .. head.name, picks)) do
        added[#added + 1] = task_id
      end
    end
    if head.queued == picks then
      -- Its queue is empty (Redis deleted the list; or it expired with its tasks
      -- while no worker ran, and nothing was picked of it): out of the ring.
      redis.call('ZREM', ring_key, head.name)
      redis.call('HDEL', tag .. KEY_TENANTS, head.name)
      left = true
    elseif head.capped and picks >= head.room then
      park(tag, head.name, tag .. KEY_RUN .. head.name, now, claiming)
    elseif picks > 0 then
      redis.call('ZADD', ring_key, int_text(head.pass), head.name)
    end
  end
  if left and redis.call('EXISTS', ring_key) == 0 and redis.call('EXISTS', parked_key) == 0 then
    -- Nothing waits: none is queued (expired tasks' IDs left with their queues).
    redis.call('HSET', stats_key, STATS_QUEUED, 0)
  elseif #added > 0 then
    redis.call('HINCRBY', stats_key, STATS_QUEUED, -#added)
  end
  return added
end

-- Start the queued task `task_id` of the partition tagged `tag` ahead of the
-- ring's order: a newcomer's task (see enqueue), which a busy worker claims at
-- its next free slot wherever the partition's turn is (workers give newcomers at
-- most half their slots, so a stream of them cannot hold the waiting tenants
-- back). Only the first task of a tenant in the ring (not parked) goes, and its
-- tenant's pass moves on as a dispatch's would; the virtual time does not (the
-- newcomer was behind, not the tenants waiting: with it moved on, its next task
-- joined behind them all and waited their turns in a round of its partition's
-- turns, seconds behind long tools). When the tenant's next task came meanwhile
-- and the tenant stays within a stride of the ring's head, that task is signalled
-- as a newcomer now (a tenant that floods gets a task or two started this way,
-- then waits its turns). Whether it left its queue, for the caller to claim first
-- in this same script, with no work entry (a direct claim), ahead of anything the
-- stream holds.
-- call: claim_next's {event_opts, ...}
local function dispatch_first(tag, stats_key, task_id, call)
  local t = redis.call('HMGET', record_key(tag, task_id), 'st', 'wk', 'tn')
  if not t[1] or TERMINAL[t[1]] or t[2] or not t[3] then
    return false  -- gone, ended, or not waiting in a tenant queue
  end
  local tenant = t[3]
  local ring_key, queue_key = tag .. KEY_RING, tag .. KEY_QUEUE .. tenant
  local pass = tonumber(redis.call('ZSCORE', ring_key, tenant))
  if not pass or redis.call('LINDEX', queue_key, 0) ~= task_id then
    return false  -- parked, or not first in its tenant's order
  end
  local tenants_key = tag .. KEY_TENANTS
  local stride = stride_of((tenant_settings(redis.call('HGET', tenants_key, tenant) or nil)))
  redis.call('LPOP', queue_key)
  local next_task = redis.call('LINDEX', queue_key, 0)
  if not next_task then
    redis.call('ZREM', ring_key, tenant)
    redis.call('HDEL', tenants_key, tenant)
  else
    redis.call('ZADD', ring_key, int_text(pass + stride), tenant)
    local head = redis.call('ZRANGE', ring_key, 0, 0, 'WITHSCORES')
    if pass <= tonumber(head[2]) + stride then
      emit(tag .. KEY_SIGNALS, call.event_opts, SIGNAL_NEWCOMER .. next_task)
    end
  end
  redis.call('HINCRBY', stats_key, STATS_QUEUED, -1)
  return true
end
