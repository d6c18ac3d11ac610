--[[
  cancel_requested: a worker asks whether a client requested cancellation.

  Includes: common

  KEYS:
    1 task           the task record hash
  ARGV:
    1 fence          "" for unfenced
  Returns:
    {RC_OK, 0 | 1}
    {RC_NOT_FOUND} | {RC_LEASE_LOST}
  Events: none.
]]
local task_key = KEYS[1]
local fence = ARGV[1]

local t = read_record(task_key, 'st', 'fn', 'cx')
if not t.st then
  return {RC_NOT_FOUND}
end
if not fence_matches(fence, t.fn) then
  return {RC_LEASE_LOST}
end
if t.cx == '1' then
  return {RC_OK, 1}
end
return {RC_OK, 0}
