--[[
  find: authorize a client against the task's binding and return its snapshot.
  Unknown and unauthorized tasks run the same commands and give the same reply.

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

local t = redis.call('HMGET', task_key, 'ep', 'pk',
  'st', 'sm', 'ca', 'ua', 'ttl', 'pi', 'or', 'rs', 'er', 'md')
if t[1] ~= endpoint or t[2] ~= binding then
  return {RC_NOT_FOUND}
end
local requests = {}
if t[3] == 'input_required' then
  requests = redis.call('HGETALL', requests_key)
end
return {RC_OK, {t[3], t[4], t[5], t[6], t[7], t[8], t[9], t[10], t[11], t[12]}, requests}
