package jobs

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
)

//go:embed schema/*.json
var schemaFS embed.FS

// Schema names, the files under schema/.
const (
	SchemaGenerate  = "generate.v1.json"
	SchemaSummarize = "summarize.v1.json"
	SchemaResult    = "result.v1.json"
	SchemaProgress  = "progress.v1.json"
	SchemaEnvelope  = "envelope.v1.json"
)

// Schema returns one JSON Schema (draft 2020-12) by file name, e.g. SchemaGenerate.
// Schemas refer to each other by these relative names.
func Schema(name string) ([]byte, error) {
	b, err := schemaFS.ReadFile("schema/" + name)
	if err != nil {
		return nil, fmt.Errorf("jobs: no schema %q (have %v)", name, SchemaNames())
	}
	return b, nil
}

// SchemaNames lists the embedded schemas.
func SchemaNames() []string {
	entries, _ := fs.ReadDir(schemaFS, "schema")
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}
