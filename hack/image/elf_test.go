package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// dynamicBinary finds a dynamically linked executable on this machine, or skips.
func dynamicBinary(t *testing.T) []byte {
	t.Helper()
	for _, name := range []string{"sh", "ls", "true"} {
		p, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		dynamic := false
		for _, prog := range f.Progs {
			dynamic = dynamic || prog.Type == elf.PT_INTERP
		}
		f.Close()
		if dynamic {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	t.Skip("no dynamically linked executable on this machine")
	return nil
}

func TestPlatformOf(t *testing.T) {
	hello, err := os.ReadFile(helloBinary)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		binary   func(t *testing.T) []byte
		want     string
		wantErrs []string
	}{
		{
			name:   "a static amd64 Go binary is linux/amd64",
			binary: func(*testing.T) []byte { return hello },
			want:   "linux/amd64",
		},
		{
			name:     "a script is refused",
			binary:   func(*testing.T) []byte { return []byte("#!/bin/sh\necho hi\n") },
			wantErrs: []string{"reading the binary as ELF"},
		},
		{
			name:     "a dynamically linked binary is refused, naming its loader",
			binary:   dynamicBinary,
			wantErrs: []string{"dynamically linked", "ld-", "CGO_ENABLED=0"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := platformOf(tc.binary(t))
			if len(tc.wantErrs) > 0 {
				if err == nil {
					t.Fatalf("got platform %s, want an error", p.String())
				}
				for _, want := range tc.wantErrs {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not mention %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.String() != tc.want {
				t.Errorf("platform %s, want %s", p.String(), tc.want)
			}
		})
	}
}
