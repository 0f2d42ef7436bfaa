package main

import (
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/IBM/sarama"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// kafkaFlags are the flags of the connection to Kafka, TLS and SASL, of
// every command that dials brokers (consume, dlq, group describe).
type kafkaFlags struct {
	tls                bool
	tlsCA              string
	tlsCert, tlsKey    string
	tlsSkipVerify      bool
	saslMechanism      string
	saslUser, saslPass string

	fs *pflag.FlagSet // the flags, for the errors to say where a value came from
}

func (k *kafkaFlags) define(fs *pflag.FlagSet) {
	k.fs = fs
	fs.BoolVar(&k.tls, "tls", false, "connect to the brokers with TLS (system roots unless --tls-ca)")
	stringVar(fs, &k.tlsCA, "tls-ca", "", nil, "PEM file of CA certificates for the brokers (implies --tls)")
	stringVar(fs, &k.tlsCert, "tls-cert", "", nil, "PEM client certificate for the brokers (with --tls-key; implies --tls)")
	stringVar(fs, &k.tlsKey, "tls-key", "", nil, "PEM private key of --tls-cert")
	fs.BoolVar(&k.tlsSkipVerify, "tls-insecure-skip-verify", false, "do not verify the brokers' certificates (testing only)")
	stringVar(fs, &k.saslMechanism, "sasl-mechanism", "", oneOf("", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"), "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; empty: no SASL")
	stringVar(fs, &k.saslUser, "sasl-user", "", nil, "SASL user name")
	stringVar(fs, &k.saslPass, "sasl-password", "", nil, "SASL password (better set as ORDERLY_SASL_PASSWORD than on the command line)")
}

func (k *kafkaFlags) check() error {
	fs := k.fs
	switch {
	case (k.tlsCert == "") != (k.tlsKey == ""):
		return usagef("%s and %s go together", flagArg(fs, "tls-cert"), flagArg(fs, "tls-key"))
	case k.saslMechanism != "" && k.saslUser == "":
		return usagef("%s needs --sasl-user", flagArg(fs, "sasl-mechanism", k.saslMechanism))
	case k.saslMechanism != "" && k.saslPass == "":
		return usagef("%s needs --sasl-password (better set as %s)", flagArg(fs, "sasl-mechanism", k.saslMechanism), envName("sasl-password"))
	case k.saslMechanism == "" && (k.saslUser != "" || k.saslPass != ""):
		return usagef("%s and %s need --sasl-mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", flagArg(fs, "sasl-user"), flagArg(fs, "sasl-password"))
	}
	return nil
}

// apply sets TLS and SASL on sc as the flags say.
func (k *kafkaFlags) apply(sc *sarama.Config) error {
	tc, err := k.tlsConfig()
	if err != nil {
		return err
	}
	if tc != nil {
		sc.Net.TLS.Enable, sc.Net.TLS.Config = true, tc
	}
	if k.saslMechanism != "" {
		sc.Net.SASL.Enable = true
		sc.Net.SASL.Handshake = true
		sc.Net.SASL.User, sc.Net.SASL.Password = k.saslUser, k.saslPass
		switch k.saslMechanism {
		case "PLAIN":
			sc.Net.SASL.Mechanism = sarama.SASLTypePlaintext
		case "SCRAM-SHA-256":
			sc.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA256
			sc.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: sha256.New} }
		case "SCRAM-SHA-512":
			sc.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA512
			sc.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: sha512.New} }
		}
	}
	return nil
}

// newClient connects to brokers with cfg and the flags' TLS and SASL; its
// error names the flags (dialError).
func (k *kafkaFlags) newClient(brokers []string, cfg *sarama.Config) (sarama.Client, error) {
	if err := k.apply(cfg); err != nil {
		return nil, err
	}
	client, err := sarama.NewClient(brokers, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %w", k.brokersError(brokers, err))
	}
	return client, nil
}

// brokersError names --brokers in err, a failure to reach them, and with
// SASL --sasl-user and --sasl-mechanism, since some brokers (kfake among
// them) close the connection on bad credentials instead of answering with
// an authentication error.
func (k *kafkaFlags) brokersError(brokers []string, err error) error {
	fs := k.fs
	at := flagArg(fs, "brokers", strings.Join(brokers, ","))
	if k.saslMechanism != "" {
		return fmt.Errorf("%s: %w (or they refused %s, %s)",
			at, err, flagArg(fs, "sasl-user", strconv.Quote(k.saslUser)), flagArg(fs, "sasl-mechanism", k.saslMechanism))
	}
	return fmt.Errorf("%s: %w", at, err)
}

// kgoOpts are the franz-go options for TLS and SASL as the flags say (the
// dlq commands read a topic with franz-go's client).
func (k *kafkaFlags) kgoOpts() ([]kgo.Opt, error) {
	tc, err := k.tlsConfig()
	if err != nil {
		return nil, err
	}
	var opts []kgo.Opt
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	switch k.saslMechanism {
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: k.saslUser, Pass: k.saslPass}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: k.saslUser, Pass: k.saslPass}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: k.saslUser, Pass: k.saslPass}.AsSha512Mechanism()))
	}
	return opts, nil
}

// tlsConfig is the brokers' TLS config as the flags say, nil without TLS.
func (k *kafkaFlags) tlsConfig() (*tls.Config, error) {
	if !k.tls && k.tlsCA == "" && k.tlsCert == "" && !k.tlsSkipVerify {
		return nil, nil
	}
	tc, err := tlsConfig(k.tlsCA, flagArg(k.fs, "tls-ca", k.tlsCA))
	if err != nil {
		return nil, err
	}
	if k.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(k.tlsCert, k.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("%s, %s: %w", flagArg(k.fs, "tls-cert", k.tlsCert), flagArg(k.fs, "tls-key", k.tlsKey), err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	tc.InsecureSkipVerify = k.tlsSkipVerify //nolint:gosec // an explicit flag, for testing
	return tc, nil
}

// tlsConfig is a TLS config with the system roots, plus the certificates
// in the PEM file ca (named by flag in errors) if given.
// flag is how an error names the CA file: its flag and path (flagArg).
func tlsConfig(ca, flag string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca == "" {
		return tc, nil
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			err = pe.Err // flag names the path already
		}
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", flag)
	}
	tc.RootCAs = pool
	return tc, nil
}

// hashFunc makes the hash of a SCRAM mechanism.
type hashFunc func() hash.Hash
