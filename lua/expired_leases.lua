--[[
  expired_leases: the tasks of a partition whose direct claim's lease ran out on
  the server's clock (the lease set's members scored at or before now), for a
  worker's reclaim to claim again with claim (entry DIRECT_ENTRY). A direct claim
  has no work entry, so XAUTOCLAIM, which takes over a dead worker's entries,
  never meets it: this is its recovery, by deadline. Read-only: claim decides
  (a lease renewed since, or a task handed back, is left alone there).

  Includes: common

  KEYS:
    1 leases         the partition's lease set (task ID -> lease deadline, ms)
  ARGV:
    1 count          the most task IDs to return
  Returns:
    {RC_OK, {task_id, ...}}  soonest deadline first
  Events: none (nothing is written).
]]
local leases_key = KEYS[1]
local count = tonumber(ARGV[1])

return {RC_OK, redis.call('ZRANGEBYSCORE', leases_key, '-inf', int_text(now_ms()), 'LIMIT', 0,
  count)}
