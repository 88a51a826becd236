-- Argo CD health of a TideDeployment (tide.dev/v1alpha1).
-- Healthy: Ready=True at the current generation, also while it collects, trains or canaries: that
--   is normal operation and can last hours, so it must not hold sync waves.
-- Suspended: what would be Healthy while spec.control.paused is true (every decision frozen, the
--   children still reconciled, so Degraded and Progressing still win).
-- Degraded: the spec is invalid, credentials or GPU classes are missing, or Degraded=True.
-- Progressing: no status yet, a spec change not yet observed, replicas still starting, or pods
--   waiting for GPU capacity (Scheduled=False, WaitingForCapacity: the scheduler or an autoscaler
--   brings it, so it is time, not a person, that fixes it).
local hs = {}

local function paused(spec)
  return spec ~= nil and spec.control ~= nil and spec.control.paused == true
end

local function find(conditions, type_)
  if conditions == nil then return nil end
  for _, condition in ipairs(conditions) do
    if condition.type == type_ then return condition end
  end
  return nil
end

-- Ready=False reasons that need a person, not time (tide_operator.api.conditions.Reason).
local terminal = {InvalidSpec = true, MissingCredentials = true, NoAllowedGPUClass = true}

local status = obj.status
if status == nil or status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to report status"
  return hs
end

local ready = find(status.conditions, "Ready")
local degraded = find(status.conditions, "Degraded")
local generation = obj.metadata.generation or 0
local observed = status.observedGeneration or 0

if status.phase == "Invalid" or (ready ~= nil and ready.status == "False" and terminal[ready.reason]) then
  hs.status = "Degraded"
  hs.message = (ready and (ready.reason .. ": " .. (ready.message or ""))) or "Invalid spec"
  return hs
end
if degraded ~= nil and degraded.status == "True" then
  hs.status = "Degraded"
  hs.message = degraded.reason .. ": " .. (degraded.message or "")
  return hs
end
if observed < generation then
  hs.status = "Progressing"
  hs.message = "Spec generation " .. generation .. " not yet observed (observed " .. observed .. ")"
  return hs
end
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  local parts = {status.phase or "Serving"}
  if status.draft ~= nil and status.draft.current ~= nil then
    table.insert(parts, "draft " .. status.draft.current)
  end
  if status.speculation ~= nil then
    table.insert(parts, status.speculation.enabled and "speculation on" or "speculation off")
  end
  hs.message = table.concat(parts, ", ")
  if paused(obj.spec) then
    hs.status = "Suspended"
    hs.message = "Paused (spec.control.paused): " .. hs.message
  end
  return hs
end
hs.status = "Progressing"
local scheduled = find(status.conditions, "Scheduled")
if scheduled ~= nil and scheduled.status == "False" and scheduled.reason == "WaitingForCapacity" then
  hs.message = scheduled.reason .. ": " .. (scheduled.message or "")
  return hs
end
hs.message = (ready and (ready.reason .. ": " .. (ready.message or ""))) or "Waiting for the Ready condition"
return hs
