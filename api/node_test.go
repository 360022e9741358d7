package api_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestOpenAINodeSDK runs testdata/node/sdk_test.mjs: the official openai npm package,
// unmodified, against the API and a real daemon. .ci/run installs the package (npm ci);
// without it the test fails under CI and is skipped elsewhere.
func TestOpenAINodeSDK(t *testing.T) {
	dir := filepath.Join("testdata", "node")
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json"))
	}
	if err != nil {
		msg := "node or the openai npm package is missing (" + err.Error() + "): run npm ci in api/testdata/node"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	b := setup(t, setupOpts{})
	text, mt := oversized(t, b.liveCapability(t))
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "sdk_test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+b.base+"/v1", "OPENAI_API_KEY="+tokenA, "REDLITE_MODEL="+b.modelName(),
		"REDLITE_OVERSIZED_BYTES="+strconv.Itoa(len(text)), "REDLITE_OVERSIZED_MAX_TOKENS="+strconv.Itoa(mt))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "ok") {
		t.Fatalf("node sdk_test.mjs: %v\n%s", err, out)
	}
	t.Logf("node sdk_test.mjs:\n%s", out)
}

// TestOpenAPITools runs testdata/node/openapi_check.mjs on the served document:
// @apidevtools/swagger-parser validates it and openapi-typescript generates types from it,
// as a client author would; either one's error fails the test.
func TestOpenAPITools(t *testing.T) {
	dir := filepath.Join("testdata", "node")
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "node_modules", "openapi-typescript", "package.json"))
	}
	if err != nil {
		msg := "node or openapi-typescript is missing (" + err.Error() + "): run npm ci in api/testdata/node"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	b := setup(t, setupOpts{noDaemon: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "openapi_check.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OPENAPI_URL="+b.base+"/v1/openapi.json")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "ok") {
		t.Fatalf("node openapi_check.mjs: %v\n%s", err, out)
	}
}
