package devstack

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

// KafkaConfig configures [StartKafka].
type KafkaConfig struct {
	// Addr is the host:port the broker listens on and advertises. Port 0
	// picks a free port; [Kafka.Addr] tells which. Defaults to
	// 127.0.0.1:9092.
	Addr string

	// DataDir keeps topics, records, committed offsets and producer state
	// across restarts. It is created if missing; two clusters cannot share
	// one. Defaults to empty: everything lives in memory and is gone on Stop.
	DataDir string

	// SyncWrites fsyncs every produced batch before it is acknowledged.
	// Defaults to false, like a real Kafka broker (log.flush.interval.messages
	// is unbounded by default): each batch is written to its segment file with
	// write(2) before the acknowledgement, without user-space buffering, so a
	// crash or kill of this process loses nothing acknowledged; only an
	// operating-system crash or power loss can lose the page cache's last
	// seconds. Everything runs on kfake's single event loop, so an fsync per
	// batch would stall every client for the length of the fsync.
	SyncWrites bool

	// Partitions is the partition count of topics created without one (auto
	// created topics, CreateTopics with -1, Topics). Defaults to 10, kfake's
	// default.
	Partitions int

	// Topics are created at start when the cluster has no persisted state,
	// with Partitions partitions, or TopicPartitions[topic] when set.
	Topics          []string
	TopicPartitions map[string]int

	// DisableAutoCreateTopics refuses to create a missing topic when a client
	// asks for it. Defaults to false: as with Kafka's default
	// auto.create.topics.enable=true, a client that opts in to auto creation
	// (kgo.AllowAutoTopicCreation) gets the topic.
	DisableAutoCreateTopics bool

	// TLS makes the broker accept only TLS connections, with this server
	// configuration (certificate, and ClientCAs for mutual TLS). Defaults
	// to nil: plaintext, as `ferry dev` runs.
	TLS *tls.Config

	// SASL makes the broker require every client to authenticate as one of
	// these users. Defaults to none: no authentication, as `ferry dev` runs.
	SASL []SASLUser

	// Logger receives kfake's log lines. Defaults to none.
	Logger kfake.Logger

	// Opts are appended to the kfake options StartKafka builds.
	Opts []kfake.Opt
}

// SASLUser is a user of an embedded broker with SASL enabled.
type SASLUser struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
	Mechanism, User, Password string
}

// WithDefaults returns a copy of c with its zero fields set to their defaults.
func (c KafkaConfig) WithDefaults() KafkaConfig {
	if c.Addr == "" {
		c.Addr = "127.0.0.1:9092"
	}
	return c
}

// Validate reports a configuration StartKafka cannot run.
func (c KafkaConfig) Validate() error {
	_, port, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return fmt.Errorf("devstack: KafkaConfig.Addr %q: %w", c.Addr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("devstack: KafkaConfig.Addr %q: bad port", c.Addr)
	}
	if c.Partitions < 0 {
		return fmt.Errorf("devstack: KafkaConfig.Partitions %d is negative", c.Partitions)
	}
	return nil
}

// Kafka is an embedded single-broker Kafka cluster.
type Kafka struct {
	cluster *kfake.Cluster
	addr    string
	lock    *os.File // flock on DataDir, nil when in memory
}

// StartKafka starts an embedded kfake cluster with one broker on cfg.Addr.
// It speaks the Kafka protocol over real sockets, so kgo, kadm and kcat can
// all use it. With a DataDir, it reloads what a previous run persisted.
func StartKafka(cfg KafkaConfig) (*Kafka, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	host, portStr, _ := net.SplitHostPort(cfg.Addr)
	port, _ := strconv.Atoi(portStr)

	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.ClusterID("ferry-dev"),
		// kfake listens on 127.0.0.1; honour the configured host instead.
		kfake.ListenFn(func(network, address string) (net.Listener, error) {
			_, p, err := net.SplitHostPort(address)
			if err != nil {
				return nil, err
			}
			return net.Listen(network, net.JoinHostPort(host, p))
		}),
	}
	if cfg.Partitions > 0 {
		opts = append(opts, kfake.DefaultNumPartitions(cfg.Partitions))
	}
	opts = append(opts, seedTopics(cfg.Topics, cfg.TopicPartitions)...)
	if !cfg.DisableAutoCreateTopics {
		opts = append(opts, kfake.AllowAutoTopicCreation())
	}
	if cfg.Logger != nil {
		opts = append(opts, kfake.WithLogger(cfg.Logger))
	}
	opts = append(opts, securityOpts(cfg)...)

	k := &Kafka{}
	if cfg.DataDir != "" {
		dir, err := filepath.Abs(cfg.DataDir)
		if err != nil {
			return nil, fmt.Errorf("devstack: kafka data dir: %w", err)
		}
		if k.lock, err = lockDir(dir); err != nil {
			return nil, err
		}
		opts = append(opts, kfake.DataDir(dir))
		if cfg.SyncWrites {
			opts = append(opts, kfake.SyncWrites())
		}
	}
	opts = append(opts, cfg.Opts...)

	c, err := kfake.NewCluster(opts...)
	if err != nil {
		k.unlock()
		return nil, fmt.Errorf("devstack: start kafka on %s: %w", cfg.Addr, err)
	}
	k.cluster = c
	k.addr = c.ListenAddrs()[0]
	return k, nil
}

// securityOpts are the kfake options of cfg's TLS listener and SASL users.
func securityOpts(cfg KafkaConfig) []kfake.Opt {
	var opts []kfake.Opt
	if cfg.TLS != nil {
		opts = append(opts, kfake.TLS(cfg.TLS))
	}
	if len(cfg.SASL) > 0 {
		opts = append(opts, kfake.EnableSASL())
	}
	for _, u := range cfg.SASL {
		// Superusers: the broker checks who connects, not ACLs.
		opts = append(opts, kfake.Superuser(u.Mechanism, u.User, u.Password))
	}
	return opts
}

// Addr returns the host:port the broker listens on, for FERRY_KAFKA_BROKERS
// and kgo.SeedBrokers.
func (k *Kafka) Addr() string { return k.addr }

// Cluster returns the underlying kfake cluster, for tests that inject faults.
func (k *Kafka) Cluster() *kfake.Cluster { return k.cluster }

// Stop closes the broker; with a DataDir it first writes its state to disk.
// It returns ctx's error if that takes longer than ctx allows; the close then
// finishes in the background.
func (k *Kafka) Stop(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		k.cluster.Close()
		k.unlock()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("devstack: stop kafka: %w", ctx.Err())
	}
}

func (k *Kafka) unlock() {
	if k.lock != nil {
		_ = k.lock.Close() // releases the flock
	}
}

// lockDir takes an exclusive lock on dir so that two clusters never write
// the same data directory.
func lockDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("devstack: create kafka data dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "devstack.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("devstack: kafka data dir lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("devstack: kafka data dir %s is in use by another process: %w", dir, err)
	}
	return f, nil
}

// seedTopics creates topics at start: those with a count in partitions with
// it, the others with the cluster's default.
func seedTopics(topics []string, partitions map[string]int) []kfake.Opt {
	byCount := map[int32][]string{}
	for _, t := range topics {
		n := int32(-1)
		if p := partitions[t]; p > 0 {
			n = int32(p)
		}
		byCount[n] = append(byCount[n], t)
	}
	opts := make([]kfake.Opt, 0, len(byCount))
	for n, ts := range byCount {
		opts = append(opts, kfake.SeedTopics(n, ts...))
	}
	return opts
}
