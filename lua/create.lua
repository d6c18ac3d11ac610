--[[
  create: admit a new task, store it and enqueue its work in one atomic step, so
  no outbox is needed and the task is readable the moment this returns.

  Admission first, with reads only, so a refused create stores nothing but the
  counts of its refusal (the partition's stats and the tenant's own, best
  effort): the tenant's open-task quota
  (its open set: task IDs scored by expiry, so a task that expires stops counting
  by itself), then its create rate (GCRA: the theoretical arrival time, in µs).
  The first write is RPUSH or XADD, both refused by a Redis out of memory
  (noeviction), so a full Redis refuses the create whole (Redis lets a script
  that has written once go on writing past maxmemory).
  The work goes straight into the stream when nothing waits in the partition
  (tenants.lua's enqueue), so an idle worker's blocked read wakes at once; else
  to the tail of the tenant's queue, dispatched fairly by claim_next. A tenant
  that was not waiting joins the ring near its head, and the task's ID goes to
  the signal stream too: busy workers, whose read loops wait for a free slot
  rather than read, give this partition their next free slot (the tenant most
  behind starts next, whichever partition it landed in). A tenant queue lives
  as long as its last task. A tenant with a quota, a rate or a cap has all its
  tasks in its home partition (the caller chose the ID), so these keys see all
  of them. A named or limited plan's terms are kept for operators, and the
  tenant marked seen (redis-tasks tenants reads both).

  Includes: common, create

  KEYS:
    1 task           the task record hash
    2 work           the partition's work stream
    3 events         the partition's event stream
    4 grant          the grant key of (task ID, endpoint, binding): a string "1"
    5 stats          the partition's stats hash (created, queued, refusals)
    6 ring           the partition's ring of tenants with tasks waiting
    7 tenants        the partition's hash of tenant settings (weight, cap)
    8 queue          the tenant's queue in this partition
    9 open           the tenant's open set (with a quota)
    10 rate          the tenant's GCRA state (with a rate)
    11 signals       the partition's signal stream
    12 plan          the tenant's plan terms, for operators (a string)
    13 refused       the tenant's refused creates by reason (a hash)
    14 seen          the partition's index of tenants with a plan kept or a refusal
                     in the last day (a sorted set by when last seen)
  ARGV:
    1 task_id
    2 binding        the record's digest of (task ID, endpoint, partition binding)
    3 origin         exact persisted bytes
    4 payload        opaque bytes
    5 ttl_ms         0: unlimited
    6 poll_ms        0: no suggested interval
    7 metadata       msgpack, or empty
    8 event_opts     the event stream's MAXLEN, then "p" to also SPUBLISH
    9 trace_context  the creating span's W3C trace context (traceparent, then a
                     space and tracestate), or empty: stored only when given
    10 tenant        the tenant's digest
    11 settings      the tenant's "<weight> <cap>", or '' for weight 1 and no cap
    12 cap           the tenant's concurrency cap, 0 for none (kept as `tc`)
    13 max_open      the tenant's open-task quota, 0 for none
    14 rate_us       the tenant's create interval (µs a create), 0 for no rate
    15 burst_us      the GCRA tolerance: (burst - 1) x rate_us
    16 fair          "1": fair dispatch (see above); "0": the work goes straight
                     into the stream, first come first served
    17 terms         the plan's terms to keep ("<weight> <cap> <quota> <rate_us>
                     <burst_us> [name]"), or '' for none: kept with the newest
                     task's expiry, for redis-tasks tenants
  Returns:
    {RC_OK, created_ms}
    {RC_EXISTS}      the ID is taken by another task; nothing is overwritten
    {RC_QUOTA}       the tenant holds max_open open tasks; nothing stored but
                     the refusal's counts
    {RC_RATE, retry_after_ms}
                     the tenant creates faster than its rate; likewise
  A retry of a create whose reply was lost finds its own task (same binding
  and origin) and answers {RC_OK, created_ms} without a second task, before any
  admission. The record keeps the binding's digest only (`bd`), never the
  endpoint or partition key, and the tenant's digest (`tn`), never its key.
  The trace context (`tp`) lives while the task does: claims return it (the
  worker's span links to it) and the terminal transition drops it, like `pl`.
  Events: one entry for the new task; a signal too when its tenant joined the
  ring (it was not waiting, and the partition has a backlog).
]]
local task_key = KEYS[1]
local work_key = KEYS[2]
local events_key = KEYS[3]
local grant_key = KEYS[4]
local stats_key = KEYS[5]
local ring_key = KEYS[6]
local tenants_key = KEYS[7]
local queue_key = KEYS[8]
local open_key = KEYS[9]
local rate_key = KEYS[10]
local signals_key = KEYS[11]
local plan = KEYS[12]
local refused_key = KEYS[13]
local seen_key = KEYS[14]
local task_id = ARGV[1]
local binding = ARGV[2]
local origin = ARGV[3]
local payload = ARGV[4]
local ttl_ms = ARGV[5]
local poll_ms = ARGV[6]
local metadata = ARGV[7]
local event_opts = ARGV[8]
local trace_context = ARGV[9]
local tenant = ARGV[10]
local settings = ARGV[11]
local cap = ARGV[12]
local max_open = ARGV[13]
local rate_us = ARGV[14]
local burst_us = ARGV[15]
local fair = ARGV[16]
local terms = ARGV[17]

local us = now_us()
local now = math.floor(us / 1000)
local reply = create_task(task_key, grant_key,
  {work = work_key, events = events_key, stats = stats_key, ring = ring_key,
   tenants = tenants_key, queue = queue_key, open = open_key, rate = rate_key,
   signals = signals_key, plan = plan, refused = refused_key, seen = seen_key},
  {us = us, now = now, now_text = int_text(now), expiries = {}, event_opts = event_opts},
  task_id, binding, origin, payload, ttl_ms, poll_ms, metadata, trace_context, tenant, settings,
  cap, max_open, rate_us, burst_us, fair, terms)
return reply
