// Package gitops reads a Foo as the tools that install and watch controllers do:
// cli-utils' kstatus, which Flux, Helm's --wait and kpt use, and Argo CD with the health
// check in artifacts/argocd, run by the Lua interpreter Argo CD embeds. The unit tests
// and the e2e suite use it; it is part of the test module, so that these libraries stay
// out of the product's go.mod.
package gitops

import (
	"fmt"
	"os"
	"path/filepath"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

// HealthCheckPath is where the Argo CD health check for Foo is, under the repository.
const HealthCheckPath = "artifacts/argocd/health.lua"

// Health is what an Argo CD health check returns: Healthy, Progressing, Degraded,
// Suspended, Missing or Unknown, and why.
type Health struct {
	Status, Message string
}

// HealthOf is the Argo CD health that says what a kstatus reading says.
var HealthOf = map[kstatus.Status]string{
	kstatus.CurrentStatus:    "Healthy",
	kstatus.InProgressStatus: "Progressing",
	kstatus.FailedStatus:     "Degraded",
}

// KStatus is kstatus's reading of obj.
func KStatus(obj *unstructured.Unstructured) (kstatus.Status, string, error) {
	result, err := kstatus.Compute(obj)
	if err != nil {
		return "", "", err
	}
	return result.Status, result.Message, nil
}

// ReadHealthCheck reads the Argo CD health check of the repository at root.
func ReadHealthCheck(root string) (string, error) {
	script, err := os.ReadFile(filepath.Join(root, HealthCheckPath))
	return string(script), err
}

// ArgoCDHealth runs the health check script on obj as Argo CD does: obj is a global
// table of the object's JSON, the script returns a table with status and message.
func ArgoCDHealth(script string, obj *unstructured.Unstructured) (Health, error) {
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		L.Push(L.NewFunction(lib.open))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	value, err := toLua(L, obj.Object)
	if err != nil {
		return Health{}, err
	}
	L.SetGlobal("obj", value)
	if err := L.DoString(script); err != nil {
		return Health{}, err
	}
	hs, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		return Health{}, fmt.Errorf("the health check returned %s, not a table", L.Get(-1).Type())
	}
	status, ok := hs.RawGetString("status").(lua.LString)
	if !ok {
		return Health{}, fmt.Errorf("the health check returned no status")
	}
	return Health{Status: string(status), Message: lua.LVAsString(hs.RawGetString("message"))}, nil
}

// toLua converts a value of unstructured JSON into Lua's.
func toLua(L *lua.LState, v any) (lua.LValue, error) {
	switch v := v.(type) {
	case nil:
		return lua.LNil, nil
	case bool:
		return lua.LBool(v), nil
	case string:
		return lua.LString(v), nil
	case int64:
		return lua.LNumber(v), nil
	case float64:
		return lua.LNumber(v), nil
	case map[string]any:
		table := L.NewTable()
		for key, element := range v {
			value, err := toLua(L, element)
			if err != nil {
				return nil, err
			}
			table.RawSetString(key, value)
		}
		return table, nil
	case []any:
		table := L.NewTable()
		for _, element := range v {
			value, err := toLua(L, element)
			if err != nil {
				return nil, err
			}
			table.Append(value)
		}
		return table, nil
	}
	return nil, fmt.Errorf("no Lua value for %T", v)
}
