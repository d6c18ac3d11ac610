--[[
  find: authorize a client against the task's binding and return its snapshot.
  Unknown and unauthorized tasks run the same commands, read the same two small
  fields, and give the same reply.

  KEYS:
    1 task           the task record hash
    2 requests       outstanding input requests
  ARGV:
    1 endpoint
    2 binding        "-" (anonymous) or "=<partition key>"
  Returns:
    {RC_OK, {st, sm, ca, ua, ttl, pi, or, rs, er, md}, {req_key, kind..body, ...}}
    {RC_NOT_FOUND}   unknown, expired or unauthorized
  Events: none.
]]
local task_key = KEYS[1]
local requests_key = KEYS[2]
local endpoint = ARGV[1]
local binding = ARGV[2]

-- The binding alone first: an unknown and an unauthorized task then cost the
-- same (one HMGET of two small fields), however large the task's origin or
-- result is. Reading everything at once made an unauthorized lookup measurably
-- slower (benchmarks/timing_side_channel.py: KS D=0.64 over 10,000 samples).
local owner = redis.call('HMGET', task_key, 'ep', 'pk')
if owner[1] ~= endpoint or owner[2] ~= binding then
  return {RC_NOT_FOUND}
end
local t = redis.call('HMGET', task_key, 'st', 'sm', 'ca', 'ua', 'ttl', 'pi', 'or', 'rs', 'er', 'md')
local requests = {}
if t[1] == 'input_required' then
  requests = redis.call('HGETALL', requests_key)
end
return {RC_OK, t, requests}
