package config

// Default sets *field to value when it holds its zero value: the one line
// every Config.WithDefaults repeats for each field.
func Default[T comparable](field *T, value T) {
	var zero T
	if *field == zero {
		*field = value
	}
}
