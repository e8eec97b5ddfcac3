package copiertest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// Shared state of the package's tests, set up once by TestMain.
var (
	repoRoot     string // this ratekit checkout
	templateDir  string // repoRoot/copier-template
	work         string // scratch directory of the whole run
	ratekitCLI   string // ratekit built from this checkout
	templateRepo string // the template published at currentVersion
)

// currentVersion is the release this checkout's template is published as;
// previousVersion is the release before it (see previousTemplate).
const (
	currentVersion  = "2.1.0"
	previousVersion = "2.0.0"
)

// previousTemplateCommit is a ratekit commit whose copier-template/ is
// release 2.0.0 as services received it: its go.mod.jinja templated the
// require block that `go mod tidy` also writes.
const previousTemplateCommit = "c397a9254433af69bdd712d7eae7f5b7e8d5c72b"

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	for _, tool := range []string{"copier", "git", "go", "make", "bash", "gofmt"} {
		if _, err := exec.LookPath(tool); err != nil {
			fmt.Fprintf(os.Stderr, "copiertest: %s not found on PATH (copier: python3 -m pip install 'copier>=9,<10')\n", tool)
			return 1
		}
	}
	_, file, _, _ := runtime.Caller(0)
	repoRoot = filepath.Dir(filepath.Dir(file))
	templateDir = filepath.Join(repoRoot, "copier-template")
	var err error
	if work, err = os.MkdirTemp("", "copiertest-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(work)
	if err := prepare(); err != nil {
		fmt.Fprintf(os.Stderr, "copiertest: %v\n", err)
		return 1
	}
	return m.Run()
}

// prepare builds the CLI from this checkout and publishes the template.
func prepare() error {
	ratekitCLI = filepath.Join(work, "bin", "ratekit")
	if out, err := command(repoRoot, nil, "go", "build", "-o", ratekitCLI, "./cmd/ratekit"); err != nil {
		return fmt.Errorf("build ratekit: %w\n%s", err, out)
	}
	templateRepo = filepath.Join(work, "template-current")
	if out, err := publish(templateDir, templateRepo, currentVersion); err != nil {
		return fmt.Errorf("publish: %w\n%s", err, out)
	}
	return nil
}

// publish runs copier-template/publish.sh, with the defaults it gives
// services (the checkout publish.sh belongs to, repoRoot) unless flags say
// otherwise.
func publish(src, repo, version string, flags ...string) (string, error) {
	args := append([]string{filepath.Join(templateDir, "publish.sh"), "--source", src}, flags...)
	return command(work, gitEnv(), "bash", append(args, repo, version)...)
}

// previousTemplate extracts release previousVersion of the template from
// this checkout's git history into dir.
func previousTemplate(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(work, "previous-template.tar")
	run(t, repoRoot, nil, "git", "archive", "-o", archive, previousTemplateCommit+":copier-template")
	run(t, dir, nil, "tar", "-xf", archive)
}

// previousRatekit extracts the whole ratekit checkout at
// previousTemplateCommit into dir: the ratekit that release previousVersion of
// the template was built against.
func previousRatekit(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(work, "previous-ratekit.tar")
	run(t, repoRoot, nil, "git", "archive", "-o", archive, previousTemplateCommit)
	run(t, dir, nil, "tar", "-xf", archive)
}

// goModJSON is what `go mod edit -json` reports of a go.mod.
type goModJSON struct {
	Module  struct{ Path string }
	Require []struct {
		Path    string
		Version string
	}
	Replace []struct {
		Old struct{ Path string }
		New struct{ Path string }
	}
}

// readGoMod parses dir/go.mod with the go command.
func readGoMod(t *testing.T, dir string) goModJSON {
	t.Helper()
	var m goModJSON
	if err := json.Unmarshal([]byte(run(t, dir, []string{"GOWORK=off"}, "go", "mod", "edit", "-json")), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// replaces maps each replaced module path of m to its replacement.
func (m goModJSON) replaces() map[string]string {
	r := make(map[string]string)
	for _, x := range m.Replace {
		r[x.Old.Path] = x.New.Path
	}
	return r
}

// requires maps each required module path of m to its version.
func (m goModJSON) requires() map[string]string {
	r := make(map[string]string)
	for _, x := range m.Require {
		r[x.Path] = x.Version
	}
	return r
}

// gitEnv gives git an identity without touching any git configuration.
func gitEnv() []string {
	return []string{
		"GIT_AUTHOR_NAME=copiertest", "GIT_AUTHOR_EMAIL=copiertest@localhost",
		"GIT_COMMITTER_NAME=copiertest", "GIT_COMMITTER_EMAIL=copiertest@localhost",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + os.DevNull,
	}
}

// projectEnv is the environment of commands run in a rendered service: its own
// module (never this checkout's go.work), and the test Redis, when there is
// one, under the variable the service reads.
func projectEnv(redisEnv string) []string {
	env := append(gitEnv(), "GOWORK=off")
	if url := os.Getenv("RATEKIT_TEST_REDIS_URL"); url != "" {
		env = append(env, redisEnv+"="+url)
	}
	return env
}

// command runs name args in dir with extra environment, returning the
// combined output.
func command(dir string, extraEnv []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), extraEnv...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// run is command that fails the test on error.
func run(t *testing.T, dir string, extraEnv []string, name string, args ...string) string {
	t.Helper()
	out, err := command(dir, extraEnv, name, args...)
	if err != nil {
		t.Fatalf("%s %s (in %s): %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return out
}

// copierCopy renders the template at src into dst with answers as --data.
func copierCopy(t *testing.T, src, dst string, answers map[string]string, extra ...string) string {
	t.Helper()
	args := append([]string{"copy", "--trust", "--defaults"}, extra...)
	args = append(args, dataArgs(answers)...)
	return run(t, work, gitEnv(), "copier", append(args, src, dst)...)
}

func dataArgs(answers map[string]string) []string {
	var args []string
	for _, k := range slices.Sorted(maps.Keys(answers)) {
		args = append(args, "--data", k+"="+answers[k])
	}
	return args
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// edit replaces the single occurrence of old in the file at path.
func edit(t *testing.T, path, old, new string) {
	t.Helper()
	s := read(t, path)
	if n := strings.Count(s, old); n != 1 {
		t.Fatalf("%s: %q occurs %d times, want once", path, old, n)
	}
	write(t, path, strings.Replace(s, old, new, 1))
}

// copyDir copies the tree at src to dst (regular files and directories).
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, info.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
}

// gitCommitAll commits the whole tree of dir, initialising the repository
// when needed (copier update needs a clean git-tracked project).
func gitCommitAll(t *testing.T, dir, msg string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, ".git")); err != nil {
		run(t, dir, gitEnv(), "git", "init", "-q", "-b", "main")
	}
	run(t, dir, gitEnv(), "git", "add", "-A")
	run(t, dir, gitEnv(), "git", "commit", "-q", "-m", msg)
}

// freeAddr returns a loopback address nobody listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// conflictMarkers lists the files of dir that hold merge conflict markers.
func conflictMarkers(t *testing.T, dir string) []string {
	t.Helper()
	var bad []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if d.IsDir() || strings.HasSuffix(p, ".rej") {
			if !d.IsDir() {
				bad = append(bad, p)
			}
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "<<<<<<<") || strings.HasPrefix(line, ">>>>>>>") {
				bad = append(bad, p)
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bad
}
