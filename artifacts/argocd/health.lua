-- Argo CD health check for samplecontroller.k8s.io/Foo, read from the Foo's status as
-- kstatus reads it: Healthy when Ready, Degraded when Stalled (the Foo cannot converge
-- until someone acts), Progressing otherwise, including while the controller has not yet
-- observed the Foo's latest spec. Install it as the argocd-cm key
-- resource.customizations.health.samplecontroller.k8s.io_Foo (docs/operations.md).
local hs = { status = "Progressing", message = "Waiting for the controller to observe the Foo" }
local status = obj.status
if status == nil or status.observedGeneration == nil then
  return hs
end
if obj.metadata.generation ~= nil and status.observedGeneration < obj.metadata.generation then
  hs.message = "Waiting for the controller to observe generation " .. obj.metadata.generation
  return hs
end
local ready = nil
for _, condition in ipairs(status.conditions or {}) do
  if condition.type == "Stalled" and condition.status == "True" then
    hs.status = "Degraded"
    hs.message = condition.message
    return hs
  end
  if condition.type == "Ready" then
    ready = condition
  end
end
if ready ~= nil then
  if ready.status == "True" then
    hs.status = "Healthy"
  end
  hs.message = ready.message
end
return hs
