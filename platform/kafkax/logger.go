package kafkax

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

// clientLogger passes franz-go's own warnings and errors (a group session
// that failed to fetch its offsets, a partition omitted from a response, a
// produce that gave up) to the process's slog logger, tagged
// component=kafka: they are the first thing to read when a consumer stops
// moving. Info and debug lines stay out; they are per request.
type clientLogger struct{}

func (clientLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (clientLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	l := slog.LevelWarn
	if level == kgo.LogLevelError {
		l = slog.LevelError
	}
	slog.Default().Log(context.Background(), l, msg, append([]any{"component", "kafka"}, keyvals...)...)
}
