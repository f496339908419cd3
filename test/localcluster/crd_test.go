package localcluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadCRDs(t *testing.T) {
	const crd = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: bars.example.com
spec:
  group: example.com
`
	tests := []struct {
		name      string
		manifest  string
		wantNames []string
		wantErr   string
	}{
		{"one CRD", crd, []string{"bars.example.com"}, ""},
		{"empty documents are skipped", "---\n" + crd + "---\n---\n" + strings.Replace(crd, "bars", "bazs", 1), []string{"bars.example.com", "bazs.example.com"}, ""},
		{"anything else is refused", crd + "---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n", nil, `/v1, Kind=Namespace "x" is not a CustomResourceDefinition`},
		{"no CRD at all", "---\n", nil, "no CustomResourceDefinition"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "crd.yaml")
			if err := os.WriteFile(path, []byte(tc.manifest), 0o644); err != nil {
				t.Fatal(err)
			}
			crds, err := readCRDs(path)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("readCRDs = %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, crd := range crds {
				names = append(names, crd.GetName())
			}
			if strings.Join(names, ",") != strings.Join(tc.wantNames, ",") {
				t.Errorf("read %v, want %v", names, tc.wantNames)
			}
		})
	}
}
