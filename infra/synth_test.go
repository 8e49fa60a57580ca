package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/envlease/envlease/infra/bundle"
)

// synthesized is the app, synthesized once per test binary and shared by
// every test: the build and the synth are the slow parts.
type synthesized struct {
	Template  map[string]any
	Assertion assertions.Template
	Outdir    string
	Stack     *EnvleaseStack
	// FunctionIDs maps a group name to its function's logical id.
	FunctionIDs map[string]string
	// Messages are the stack's synthesis annotations (cdk-nag's findings).
	Messages []message
	// Missing are groups without functions/<name>/main.go; BuildErr is the
	// error of building the rest. Both make TestRealFunctionsBuilt fail; the
	// other tests then run against stub assets for those groups.
	Missing  []string
	BuildErr error

	BuildTime, SynthTime time.Duration
}

type message struct {
	Level, Path, Text string
}

var (
	synthOnce sync.Once
	synthRes  *synthesized
	synthErr  error
	tmpRoot   string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if tmpRoot != "" {
		os.RemoveAll(tmpRoot)
	}
	jsii.Close()
	os.Exit(code)
}

func synth(t *testing.T) *synthesized {
	t.Helper()
	synthOnce.Do(func() { synthRes, synthErr = doSynth() })
	if synthErr != nil {
		t.Fatalf("synth: %v", synthErr)
	}
	return synthRes
}

func doSynth() (*synthesized, error) {
	root, err := bundle.FindRoot(".")
	if err != nil {
		return nil, err
	}
	if tmpRoot, err = os.MkdirTemp("", "envlease-infra-test-"); err != nil {
		return nil, err
	}
	res := &synthesized{}

	// Build the real binaries, as the app does (into a private folder so a
	// concurrent `go run ./scripts/build` is not disturbed).
	var present []string
	for _, g := range Groups {
		if _, err := os.Stat(filepath.Join(root, bundle.FunctionsDir, g.Name, "main.go")); err == nil {
			present = append(present, g.Name)
		} else {
			res.Missing = append(res.Missing, g.Name)
		}
	}
	dirs := map[string]string{}
	if len(present) > 0 {
		start := time.Now()
		built, err := bundle.Build(context.Background(), bundle.Options{
			Root: root, OutDir: filepath.Join(tmpRoot, "lambda"), Functions: present,
		})
		res.BuildTime = time.Since(start)
		if err != nil {
			res.BuildErr = err
		} else {
			dirs = built.Dirs
		}
	}
	for _, g := range Groups {
		if dirs[g.Name] == "" {
			stub := filepath.Join(tmpRoot, "stub", g.Name)
			if err := os.MkdirAll(stub, 0o755); err != nil {
				return nil, err
			}
			if err := os.WriteFile(filepath.Join(stub, "bootstrap"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
				return nil, err
			}
			dirs[g.Name] = stub
		}
	}

	start := time.Now()
	res.Outdir = filepath.Join(tmpRoot, "cdk.out")
	app, stack, err := newApp(appOptions{Root: root, Outdir: res.Outdir, Groups: Groups, AssetDirs: dirs, NagReports: true})
	if err != nil {
		return nil, err
	}
	asm := app.Synth(nil)
	art := asm.GetStackByName(jsii.String(StackName))
	raw, err := os.ReadFile(*art.TemplateFullPath())
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, &res.Template); err != nil {
		return nil, err
	}
	for _, m := range *art.Messages() {
		text := fmt.Sprint(m.Entry.Data)
		if s, ok := m.Entry.Data.(*string); ok && s != nil {
			text = *s
		}
		res.Messages = append(res.Messages, message{Level: string(m.Level), Path: *m.Id, Text: text})
	}
	res.SynthTime = time.Since(start)
	res.Stack = stack
	res.FunctionIDs = map[string]string{}
	for name, fn := range stack.Functions {
		res.FunctionIDs[name] = logicalID(fn)
	}
	tmpl := res.Template
	res.Assertion = assertions.Template_FromJSON(&tmpl, nil)
	return res, nil
}

// resources returns the template's resources of one type, by logical id.
func (s *synthesized) resources(typ string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range s.Template["Resources"].(map[string]any) {
		res := r.(map[string]any)
		if res["Type"] == typ {
			out[id] = res
		}
	}
	return out
}

func props(r map[string]any) map[string]any {
	p, _ := r["Properties"].(map[string]any)
	return p
}

// check runs a CDK assertion, turning its panic into a test error.
func check(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s: %v", what, r)
		}
	}()
	f()
}

// ref returns the logical id a {"Ref": id} or {"Fn::GetAtt": [id, attr]} names.
func ref(v any) string {
	m, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	if id, ok := m["Ref"].(string); ok {
		return id
	}
	if ga, ok := m["Fn::GetAtt"].([]any); ok && len(ga) > 0 {
		id, _ := ga[0].(string)
		return id
	}
	if j, ok := m["Fn::Join"].([]any); ok && len(j) == 2 {
		for _, part := range j[1].([]any) {
			if id := ref(part); id != "" {
				return id
			}
		}
	}
	return ""
}

func strList(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			if s, ok := e.(string); ok {
				out = append(out, s)
			} else {
				b, _ := json.Marshal(e)
				out = append(out, string(b))
			}
		}
		return out
	}
	b, _ := json.Marshal(v)
	return []string{string(b)}
}

func TestRealFunctionsBuilt(t *testing.T) {
	s := synth(t)
	t.Logf("built %d bootstrap binaries in %s; synthesized in %s",
		len(Groups)-len(s.Missing), s.BuildTime.Round(time.Millisecond), s.SynthTime.Round(time.Millisecond))
	if len(s.Missing) > 0 {
		t.Errorf("the stack deploys %d functions but these have no package main yet (synthesized with stub assets instead): %s",
			len(Groups), strings.Join(s.Missing, ", "))
	}
	if s.BuildErr != nil {
		var me *bundle.MissingError
		if !errors.As(s.BuildErr, &me) {
			t.Errorf("building the Lambda binaries failed: %v", s.BuildErr)
		}
	}
}
