-- The work stream's one writer. Every entry of a partition's work stream goes in
-- through here: a task's entry (`t=<id>`), whose ID its record keeps as `wk`, so
-- that "in the stream" and "has a `wk` other than DIRECT_ENTRY" are one fact at
-- every script's end (a claim met, a cancellation, a terminal write all find the
-- entry through `wk`; a task a batch claim took straight from its queue has `wk`
-- DIRECT_ENTRY and its lease in the lease set; a task without `wk` waits in its
-- tenant's queue, or is parked); and doorbells (`d=1`, no task), at most one a
-- script call, rung at its end (ring_due), so that no claim in the call meets one.

-- Add the work entry of `task_id` to the stream `work_key`; its ID. `record` says
-- where the record keeps it as `wk`: a table of fields the caller writes to the
-- record with its own HSET (the ID is appended to them: no second command), the
-- record's key (an HSET here), or nil when a claim in this same script takes the
-- entry (claim_next's dispatch): claim_entry then writes `wk` with the lease, or
-- drops the entry, on every path.
local function add_work(work_key, task_id, record)
  local entry = redis.call('XADD', work_key, '*', 't', task_id)
  if type(record) == 'table' then
    record[#record + 1] = 'wk'
    record[#record + 1] = entry
  elseif record then
    redis.call('HSET', record, 'wk', entry)
  end
  return entry
end

-- The doorbell the call `call` asked for (call.doorbell, set where a parked tenant
-- came back, or a batch claim found tasks still waiting for a worker with free
-- slots), rung once, at the call's end: a worker blocked on the stream wakes and
-- claims a batch itself.
local function ring_due(call, work_key)
  if call.doorbell then
    call.doorbell = false
    redis.call('XADD', work_key, '*', 'd', '1')
  end
end
