--[[
  create: admit new tasks of one partition, store each and enqueue its work, each
  in one atomic step (create_task, lua/includes/create.lua, tells each step), so no
  outbox is needed and a task is readable the moment this returns. A manager sends
  the creates its callers made together (one event-loop turn) as one call per
  partition, and a lone create as a call of one; each is admitted and answered
  exactly as if it were alone, in order. What they share is written once: the
  clock is read once, the stats count the creates and the queued tasks with one
  HINCRBY each, each tenant queue's expiry is set once, and one event entry names
  every task created (published on a cluster as one line). The task and tenant
  keys are built here from the partition's hash tag, the way KeySpace names them
  (record_key, KEY_GRANT and the tenant infixes after the tag), so they share the
  declared keys' slot.

  Includes: common, keys, tenants, create

  KEYS:
    1 work           the partition's work stream
    2 events         the partition's event stream
    3 stats          the partition's stats hash (created, queued, refusals)
    4 ring           the partition's ring of tenants with tasks waiting
    5 tenants        the partition's hash of tenant settings (weight, cap)
    6 signals        the partition's signal stream
    7 seen           the partition's index of tenants with a plan kept or a refusal
  ARGV:
    1 tag            the partition's hash tag, e.g. {rt:3.17}
    2 event_opts     the event stream's MAXLEN, then "p" to also SPUBLISH
    3 fair           "1": fair dispatch (see create_task); "0": the work goes
                     straight into the stream, first come first served
    4.. creates      (task_id, grant, binding, origin, payload, ttl_ms, poll_ms,
                     metadata, trace_context, tenant, limits) a group per task:
                     `grant` the grant key's digest (after the tag and KEY_GRANT),
                     `binding` the record's digest of (task ID, endpoint,
                     partition binding), `origin` its exact persisted bytes,
                     `payload` opaque bytes, `ttl_ms` (0: unlimited), `poll_ms`
                     (0: no suggested interval), `metadata` (msgpack, or empty),
                     `trace_context` (the creating span's traceparent, a space and
                     tracestate, or empty), `tenant` the tenant's digest, `limits`
                     '' for a tenant with none, else its settings ("<weight>
                     <cap>", or '' for weight 1 and no cap), concurrency cap,
                     open-task quota, create interval (us), GCRA tolerance
                     ((burst - 1) x interval) and plan terms to keep ('' for
                     none) as "<settings>|<cap>|<max_open>|<rate_us>|<burst_us>|
                     <terms>" (most tenants have none: five arguments a create
                     fewer); the loader checks this layout against the binding's
                     CreateArgs and the unpacking below, and gives the script
                     CREATES_FROM and CREATES_EACH
  Returns:
    {RC_OK, code, value, code, value, ...}  a pair per create, in order:
      RC_OK, created_ms        created, or found: a retry of a create whose reply
                               was lost finds its own task (same binding and
                               origin) and creates nothing
      RC_EXISTS, ''            the ID is taken by another task; nothing stored
      RC_QUOTA, ''             the tenant holds max_open open tasks; nothing stored
                               but the refusal's counts
      RC_RATE, retry_after_ms  the tenant creates faster than its rate; likewise
      RC_NOT_FOUND, ''         a task ID of another partition, or limits that do
                               not parse; nothing stored
  Events: one entry for all the tasks it creates, their IDs separated by spaces,
  published ("p") as one line; a signal for each newcomer (create_task).
]]
local work_key = KEYS[1]
local events_key = KEYS[2]
local stats_key = KEYS[3]
local ring_key = KEYS[4]
local tenants_key = KEYS[5]
local signals_key = KEYS[6]
local seen_key = KEYS[7]
local tag = ARGV[1]
local event_opts = ARGV[2]
local fair = ARGV[3]

local prefix = id_prefix_of(tag)
local us = now_us()
local creates = {created = {}, queued = 0, queues = {}}
local now = math.floor(us / 1000)
local call = {us = us, now = now, now_text = int_text(now), expiries = {},
  event_opts = event_opts, fair = fair == '1', creates = creates}
-- A tenant's keys, made once per call: a batch's creates are mostly one tenant's.
local tenant_keys = {}
-- One create's arguments by name, each create's written over the last's: a table a
-- create cost it 3 %, one for the call nothing measurable.
local c = {}
local out = {RC_OK}
for i = CREATES_FROM, #ARGV - CREATES_EACH + 1, CREATES_EACH do
  local task_id, grant, binding, origin, payload, ttl_ms, poll_ms, metadata, trace_context,
    tenant, limits = unpack(ARGV, i, i + CREATES_EACH - 1)
  local settings, cap, max_open, rate_us, burst_us, terms = '', '0', '0', '0', '0', ''
  if limits ~= '' then
    settings, cap, max_open, rate_us, burst_us, terms =
      string.match(limits, '^([%d ]*)|(%d+)|(%d+)|(%d+)|(%d+)|(.*)$')
  end
  local reply
  -- The manager made the ID (new_task_id); one of another partition would be
  -- stored where no lookup finds it.
  if not of_partition(task_id, prefix) or not settings then
    reply = {RC_NOT_FOUND}
  else
    local k = tenant_keys[tenant]
    if not k then
      k = {tag = tag, work = work_key, events = events_key, stats = stats_key, ring = ring_key,
        tenants = tenants_key, signals = signals_key, seen = seen_key,
        queue = tag .. KEY_QUEUE .. tenant}
      tenant_keys[tenant] = k
    end
    c.task_key, c.grant_key = record_key(tag, task_id), tag .. KEY_GRANT .. grant
    c.task_id, c.binding, c.origin, c.payload = task_id, binding, origin, payload
    c.ttl_ms, c.poll_ms, c.metadata, c.trace_context = ttl_ms, poll_ms, metadata, trace_context
    c.tenant, c.settings, c.cap, c.terms = tenant, settings, cap, terms
    c.max_open, c.rate_us, c.burst_us = max_open, rate_us, burst_us
    reply = create_task(k, call, c)
  end
  out[#out + 1] = reply[1]
  out[#out + 1] = reply[2] or ''
end
queues_live(creates, stats_key)
local created = creates.created
if #created > 0 then
  redis.call('HINCRBY', stats_key, STATS_CREATED, #created)
  emit(events_key, event_opts, table.concat(created, ' '))
end
return out
