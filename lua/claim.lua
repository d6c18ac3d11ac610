--[[
  claim: a worker takes a task it read (or reclaimed) from the work stream.
  Bumps the fence, so every earlier holder's writes are refused from now on,
  counts the attempt, and records the lease. The new fence is above the old one
  and above the server clock (ms x 1024, plus a tiebreak from the consumer
  name): a claim lost in a failover is never re-issued with the same fence. A task that will never run is
  settled here instead: expired or already terminal (entry dropped), cancelled
  by a client while no worker was running it (ends cancelled), or delivered more
  than max_attempts times (ends failed: a poison task cannot loop forever).
  A first claim that runs the task adds one to its pickup bucket in the stats (its
  first ever: a task handed back or parked is claimed again without a pickup).
  A task of a capped tenant at its cap is deferred: back to the head of its
  tenant's queue (RC_DEFERRED). The tenant keys it touches then (queue, run set,
  ring, parked set, tenants hash) are named here from the task key's tag and the
  record's tenant, in the task's slot, as claim_next names a task's keys.

  Includes: common, keys, work, claim

  KEYS:
    1 task           the task record hash
    2 requests       outstanding input requests
    3 issued         issued input keys
    4 answers        accepted answers not yet taken
    5 journal        the answer journal
    6 work           the partition's work stream
    7 events         the partition's event stream
    8 stats          the partition's stats hash (terminal transitions, pickups)
  ARGV:
    1 task_id
    2 entry_id       the work entry the worker read, or DIRECT_ENTRY ("0-1") for
                     a task whose lease it found run out in the lease set
    3 consumer       the worker's consumer name (lease owner)
    4 lease_ms
    5 max_attempts
    6 poison_error   msgpack JSON-RPC error for a poisoned task
    7 event_opts     the event stream's MAXLEN, then "p" to also SPUBLISH
  Returns:
    {RC_OK, backlog, claim}
    backlog          1 when tenants' tasks wait in the partition's ring (the
                     worker should claim the next batch rather than block), else 0
    claim            one of:
    {RC_OK, fence, attempt, origin, payload, trace_context, parks, recorded}
                     (trace_context: as create stored it, or empty; parks: how
                     many times the task was parked, as text, "0" for none;
                     recorded: {key, fingerprint, answer, ...}, the answers a
                     replaying run's rounds return without a call, empty for a
                     first run: includes/claim.lua's recorded_answers)
    {RC_NOT_FOUND}   expired or unknown: entry dropped
    {RC_TERMINAL}    already terminal: entry dropped
    {RC_CANCELLED}   cancellation was requested while no worker ran it: ended cancelled
    {RC_POISONED}    attempts exhausted: ended failed with poison_error
    {RC_LEASE_HELD}  another worker's lease has not expired: nothing changed
    {RC_DEFERRED}    its tenant is at its concurrency cap: back in its queue
  A direct claim (DIRECT_ENTRY) of a task whose record no longer says so (it was
  handed back or parked since its lease was read) gets RC_LEASE_HELD: its stale
  lease set entry goes, the task is left to whoever takes it now.
  A retry by the same consumer for the same entry while its lease lasts gets
  that lease back ({RC_OK, ...}) without a second fence bump; a retry of the
  claim that ended the task (the record's `ce`) gets RC_CANCELLED or
  RC_POISONED again, not RC_TERMINAL.
  Events: one entry when the task ends here.
]]
local task_key = KEYS[1]
local work_key = KEYS[6]
local stats_key = KEYS[8]
local task_id = ARGV[1]
local entry_id = ARGV[2]
local consumer = ARGV[3]
local lease_ms = tonumber(ARGV[4])
local max_attempts = tonumber(ARGV[5])
local poison_error = ARGV[6]
local event_opts = ARGV[7]

local keys = leading_task_keys()
local call = {now = now_ms(), event_opts = event_opts, pickups = {}, leased = {},
  consumer = consumer, lease_ms = lease_ms, max_attempts = max_attempts,
  poison_error = poison_error, reclaiming_direct = entry_id == DIRECT_ENTRY}
local reply = claim_entry(keys, task_id, entry_id, call)
lease_direct(work_key, call)
record_pickups(stats_key, call.pickups)
ring_due(call, work_key)
local backlog = redis.call('EXISTS', tag_of(task_key, task_id) .. KEY_RING)
return {RC_OK, backlog, reply}
