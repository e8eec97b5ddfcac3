package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesserver"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesv1"
	"github.com/ratekit/ratekit/internal/redistest"
)

const overrides = `documents:
  - service: web
    limiter: rack_request
    overrides:
      - selector: {plan: premium}
        rules:
          - name: per_ns
            action: limit
            characteristics: [root_namespace]
            limit: 5000
            period_s: 60
`

// TestServeApplyAndGracefulStop runs the binary's serve on loopback against
// the real Redis, applies a file through the management API, reads it back
// over gRPC, checks health and reflection, and stops it with its context.
func TestServeApplyAndGracefulStop(t *testing.T) {
	url := redistest.URL(t)
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan [2]string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-redis", url, "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0", "-key-prefix", redistest.Prefix(t)},
			io.Discard, func(g, h string) { addrs <- [2]string{g, h} })
	}()
	var a [2]string
	select {
	case a = <-addrs:
	case err := <-done:
		t.Fatalf("serve ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not listen within 30s")
	}
	grpcAddr, base := a[0], "http://"+a[1]

	file := filepath.Join(t.TempDir(), "overrides.yaml")
	if err := os.WriteFile(file, []byte(overrides), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(ctx, []string{"apply", "-check", file}, &out, nil); err != nil || !strings.Contains(out.String(), "1 document OK") {
		t.Fatalf("apply -check: %v %q", err, out.String())
	}
	out.Reset()
	if err := run(ctx, []string{"apply", "-server", base, file}, &out, nil); err != nil || !strings.Contains(out.String(), "web/rack_request: revision 1-") {
		t.Fatalf("apply: %v %q", err, out.String())
	}

	out.Reset()
	if err := run(ctx, []string{"get", "-server", base, "-service", "web", "-limiter", "rack_request", "plan=premium"}, &out, nil); err != nil ||
		!strings.Contains(out.String(), `"limit"`) || !strings.Contains(out.String(), "5000") {
		t.Fatalf("get: %v %q", err, out.String())
	}

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := rulesv1.NewRulesServiceClient(conn).GetRules(ctx, &rulesv1.GetRulesRequest{Service: "web", Limiter: "rack_request", Identifier: map[string]string{"plan": "premium"}})
	if err != nil || resp.GetRules().GetRules()[0].GetLimit() != 5000 {
		t.Fatalf("GetRules: %v %v", resp, err)
	}
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "ratekit.rules.v1.RulesService"})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", h, err)
	}
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	rr, err := stream.Recv()
	if err != nil || !strings.Contains(rr.String(), "ratekit.rules.v1.RulesService") {
		t.Fatalf("reflection: %v %v", rr, err)
	}
	_ = stream.CloseSend()

	for path, want := range map[string]string{"/healthz": "ok", "/metrics": `ratekit_rules_server_answers_total{outcome="override"} 2`} {
		r, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if !strings.Contains(string(b), want) {
			t.Fatalf("%s: %s, want %q", path, b, want)
		}
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve after cancel: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop within 30s")
	}
}

func TestApplyRejectsInvalidFileWhole(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(file, []byte(strings.Replace(overrides, "period_s: 60", "period_s: sixty", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	// The server is never reached: the file fails its checks first.
	err := run(context.Background(), []string{"apply", "-server", "http://" + redistest.UnusedAddr(t), file}, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "bad.yaml:11:23: per_ns: period_s must be a whole number") {
		t.Fatalf("error %v, want it to name bad.yaml, line 11 and the rule", err)
	}
}

func TestVersion(t *testing.T) {
	for _, arg := range []string{"-version", "--version", "version"} {
		var out strings.Builder
		if err := run(context.Background(), []string{arg}, &out, nil); err != nil || !strings.HasPrefix(out.String(), "ratekit-rules ") || !strings.Contains(out.String(), "(go") {
			t.Errorf("%s: %v, %q", arg, err, out.String())
		}
	}
}

// apply reads at most the bound of every rules document (docs/limits.md):
// a larger file is refused by its size, before it is read, naming it.
func TestApplyRefusesOversizedFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "big.yaml")
	big := overrides + "# " + strings.Repeat("x", config.MaxFileSize) + "\n"
	if err := os.WriteFile(file, []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), []string{"apply", "-check", file}, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "big.yaml:1:1: the file is larger than 1048576 bytes") {
		t.Fatalf("error %v, want it to refuse big.yaml by its size", err)
	}
}

// A token file is read up to maxTokenBytes: a larger one (a mistaken path,
// a device that never ends) is refused, not read whole.
func TestTokenFileBounded(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, bytes.Repeat([]byte("t"), maxTokenBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readToken(file); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("readToken of %d bytes: %v, want a refusal by size", maxTokenBytes+1, err)
	}
}

// apply never reports success for nothing: a file without documents is an
// error that says so, and no server is called. apply -check refuses it
// too: a check that passes a file apply then refuses checks nothing.
func TestApplyEmptyFileFails(t *testing.T) {
	for _, body := range []string{"documents: []\n", "{}\n"} {
		file := filepath.Join(t.TempDir(), "empty.yaml")
		if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, mode := range [][]string{{"-server", "http://" + redistest.UnusedAddr(t)}, {"-check"}} {
			var out strings.Builder
			err := run(context.Background(), append(append([]string{"apply"}, mode...), file), &out, nil)
			if err == nil || !strings.Contains(err.Error(), "empty.yaml holds no override documents: nothing applied") || out.Len() != 0 {
				t.Fatalf("%q, apply %s: error %v (output %q), want it to say nothing was applied", body, mode[0], err, out.String())
			}
		}
	}
}

// The built binary: help is a result (stdout, exit 0); a usage mistake is
// reported on stderr, with the name meant for a typo, and exits 2; a failure
// exits 1.
func TestCommandLine(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "ratekit-rules")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte(overrides), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("documents: [{service: web}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	available := filepath.Join(dir, "available.yaml")
	if err := os.WriteFile(available, []byte("available_limiters:\n  rack_request:\n    description: every request\n    available_properties: [plan]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args           []string
		code           int
		stdout, stderr string // contained; "" for stdout: nothing
	}{
		{[]string{"-h"}, 0, "usage:\n  ratekit-rules -version\n", ""},
		{[]string{"help"}, 0, "\nexit codes: 0 success", ""},
		{[]string{"help", "serve"}, 0, "flags of serve:\n", ""},
		{[]string{"serve", "-h"}, 0, "  -write-token-file string\n", ""},
		{[]string{"apply", "--help"}, 0, "  -token-file string\n", ""},
		{nil, 2, "", "ratekit-rules: usage:\n"},
		{[]string{"srve"}, 2, "", `ratekit-rules: unknown command "srve"; did you mean "serve"?`},
		{[]string{"help", "aply"}, 2, "", `ratekit-rules: unknown command "aply"; did you mean "apply"?`},
		{[]string{"serve", "-grcp", "127.0.0.1:0"}, 2, "", "ratekit-rules: serve: flag provided but not defined: -grcp; did you mean -grpc?\nrun 'ratekit-rules serve -h' for its flags\n"},
		{[]string{"serve", "-read-timeout", "0s"}, 2, "", "-read-timeout and -write-timeout must be positive"},
		{[]string{"serve", "-redis", "redis://127.0.0.1:1", "-redis-cluster", "127.0.0.1:2"}, 2, "", "-redis and -redis-cluster name two stores: give one"},
		{[]string{"apply", "-check"}, 2, "", "ratekit-rules: usage:\n"},
		{[]string{"apply", "-check", filepath.Join(dir, "missing.yaml")}, 2, "", "missing.yaml: no such file or directory"},
		{[]string{"get", "-server", "http://127.0.0.1:1", "-service", "web", "-limiter", "l", "plan"}, 2, "", `identifier: want PROPERTY=VALUE, got "plan"`},
		{[]string{"apply", "-check", bad}, 1, "", "bad.yaml"},
		// -available cross-checks the documents of its service (the rule's
		// root_namespace is not declared); a name no service can have, or
		// a service given twice, would leave them unchecked or checked
		// against one of two files: a usage error.
		{[]string{"apply", "-check", "-available", "web=" + available, good}, 1, "", `characteristic "root_namespace" is not one of the limiter's available_properties`},
		{[]string{"apply", "-check", "-available", "Web=" + available, good}, 2, "", `service name "Web" must match`},
		{[]string{"apply", "-check", "-available", "web=" + available, "-available", "web=" + available, good}, 2, "", "-available web is given twice"},
		// A -server that does not parse is not quoted: it may hold a password.
		{[]string{"apply", "-server", "http://u:s3cret@127.0.0.1:9x", good}, 2, "", "-server: not an http(s) URL (the URL is not shown"},
		{[]string{"get", "-server", "http://u:s3cret@127.0.0.1:9x", "-service", "web", "-limiter", "l"}, 2, "", "-server: not an http(s) URL (the URL is not shown"},
	} {
		cmd := exec.Command(bin, tt.args...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := cmd.ProcessState.ExitCode()
		if err != nil && code <= 0 {
			t.Fatal(err)
		}
		if code != tt.code || !strings.Contains(stdout.String(), tt.stdout) || tt.stdout == "" && stdout.Len() > 0 || strings.Contains(stderr.String(), "s3cret") ||
			!strings.Contains(stderr.String(), tt.stderr) || tt.stderr == "" && stderr.Len() > 0 {
			t.Errorf("%q: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit %d, stdout with %q, stderr with %q", tt.args, code, stdout.String(), stderr.String(), tt.code, tt.stdout, tt.stderr)
		}
	}
}

// get reads an answer of at most rulesserver.MaxDocumentBytes and says so
// of a larger one, which it used to cut and then fail to decode ("unexpected
// EOF").
func TestGetRefusesAnOversizedAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"revision": "`+strings.Repeat("r", rulesserver.MaxDocumentBytes)+`"}`)
	}))
	t.Cleanup(srv.Close)
	var out bytes.Buffer
	err := run(context.Background(), []string{"get", "-server", srv.URL, "-service", "web", "-limiter", "l"}, &out, nil)
	if err == nil || !strings.Contains(err.Error(), "the answer is larger than 1048576 bytes") {
		t.Fatalf("get: %v, want the answer's bound named", err)
	}
}
