package main

import (
	"slices"
	"testing"
)

func TestKubeconfigFromArgs(t *testing.T) {
	for _, c := range []struct {
		args     []string
		want     string
		wantRest []string
	}{
		{nil, "", nil},
		{[]string{"-v=4", "--workers=2"}, "", []string{"-v=4", "--workers=2"}},
		{[]string{"--kubeconfig=/a", "-v=4"}, "/a", []string{"-v=4"}},
		{[]string{"-kubeconfig", "/b", "--workers=2"}, "/b", []string{"--workers=2"}},
		{[]string{"--kubeconfig=/a", "--kubeconfig", "/c"}, "/c", nil},
		{[]string{"--kubeconfig-extra=x"}, "", []string{"--kubeconfig-extra=x"}},
	} {
		got, rest := kubeconfigFromArgs(c.args)
		if got != c.want || !slices.Equal(rest, c.wantRest) {
			t.Errorf("kubeconfigFromArgs(%q) = %q, %q; want %q, %q", c.args, got, rest, c.want, c.wantRest)
		}
	}
}
