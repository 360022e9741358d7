package daemon

// DefaultModel returns the path of the built-in default model, writing it to cacheDir
// (DefaultCacheDir when empty) on first use.
func DefaultModel(cacheDir string) (string, error) {
	return "", errNoDefaultModel
}
