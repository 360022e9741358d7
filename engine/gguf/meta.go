package gguf

import "fmt"

// Typed metadata lookups. Each error names the key and says what was wrong with it, so that a
// model missing a hyperparameter reports exactly which one.

// String returns a string value.
func (f *File) String(key string) (string, error) {
	v, err := f.must(key)
	if err != nil {
		return "", err
	}
	s, ok := v.Str()
	if !ok {
		return "", typeErr(key, v, "string")
	}
	return s, nil
}

// StringOr returns a string value, or def when the key is absent.
func (f *File) StringOr(key, def string) (string, error) {
	if _, ok := f.Get(key); !ok {
		return def, nil
	}
	return f.String(key)
}

// Int returns an integer value of any width.
func (f *File) Int(key string) (int64, error) {
	v, err := f.must(key)
	if err != nil {
		return 0, err
	}
	n, ok := v.Int()
	if !ok {
		return 0, typeErr(key, v, "integer")
	}
	return n, nil
}

// IntOr returns an integer value, or def when the key is absent.
func (f *File) IntOr(key string, def int64) (int64, error) {
	if _, ok := f.Get(key); !ok {
		return def, nil
	}
	return f.Int(key)
}

// Float returns a float (or integer) value.
func (f *File) Float(key string) (float64, error) {
	v, err := f.must(key)
	if err != nil {
		return 0, err
	}
	x, ok := v.Float()
	if !ok {
		return 0, typeErr(key, v, "number")
	}
	return x, nil
}

// FloatOr returns a float value, or def when the key is absent.
func (f *File) FloatOr(key string, def float64) (float64, error) {
	if _, ok := f.Get(key); !ok {
		return def, nil
	}
	return f.Float(key)
}

// BoolOr returns a bool value, or def when the key is absent.
func (f *File) BoolOr(key string, def bool) (bool, error) {
	v, ok := f.Get(key)
	if !ok {
		return def, nil
	}
	b, ok := v.Bool()
	if !ok {
		return false, typeErr(key, v, "bool")
	}
	return b, nil
}

// Strings returns an array of strings.
func (f *File) Strings(key string) ([]string, error) {
	v, err := f.must(key)
	if err != nil {
		return nil, err
	}
	s, ok := v.Strings()
	if !ok {
		return nil, typeErr(key, v, "array of strings")
	}
	return s, nil
}

// Ints returns an array of integers.
func (f *File) Ints(key string) ([]int64, error) {
	v, err := f.must(key)
	if err != nil {
		return nil, err
	}
	s, ok := v.Ints()
	if !ok {
		return nil, typeErr(key, v, "array of integers")
	}
	return s, nil
}

// Floats returns an array of numbers as float32s.
func (f *File) Floats(key string) ([]float32, error) {
	v, err := f.must(key)
	if err != nil {
		return nil, err
	}
	s, ok := v.Floats()
	if !ok {
		return nil, typeErr(key, v, "array of numbers")
	}
	return s, nil
}

// Architecture returns general.architecture, the prefix of the model's hyperparameter keys.
func (f *File) Architecture() (string, error) { return f.String("general.architecture") }

func (f *File) must(key string) (Value, error) {
	v, ok := f.Get(key)
	if !ok {
		return Value{}, fmt.Errorf("gguf: metadata key %q is missing", key)
	}
	return v, nil
}

func typeErr(key string, v Value, want string) error {
	got := v.Type.String()
	if v.Type == TypeArray {
		got = "array of " + v.Elem.String()
	}
	return fmt.Errorf("gguf: metadata key %q is %s, want %s", key, got, want)
}
