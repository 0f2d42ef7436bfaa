package main

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// scramClient is sarama's SCRAMClient for SCRAM-SHA-256 and -512 (RFC
// 5802, RFC 7677): the standard library has every piece, so no third-party
// SCRAM package is needed.
type scramClient struct {
	hash hashFunc

	user, pass, authz string
	nonce             string
	clientFirstBare   string
	serverSignature   []byte
	step              int
	done              bool
}

func (c *scramClient) Begin(user, pass, authz string) error {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return fmt.Errorf("scram: nonce: %w", err)
	}
	c.user, c.pass, c.authz = user, pass, authz
	c.nonce = base64.RawStdEncoding.EncodeToString(b)
	c.clientFirstBare = "n=" + saslName(user) + ",r=" + c.nonce
	c.step, c.done = 0, false
	return nil
}

func (c *scramClient) gs2Header() string {
	if c.authz == "" {
		return "n,,"
	}
	return "n,a=" + saslName(c.authz) + ","
}

func (c *scramClient) Step(challenge string) (string, error) {
	c.step++
	switch c.step {
	case 1:
		return c.gs2Header() + c.clientFirstBare, nil
	case 2:
		return c.clientFinal(challenge)
	case 3:
		attrs := scramAttrs(challenge)
		if e, ok := attrs["e"]; ok {
			return "", fmt.Errorf("scram: server refused the proof: %s", e)
		}
		v, err := base64.StdEncoding.DecodeString(attrs["v"])
		if err != nil || !hmac.Equal(v, c.serverSignature) {
			return "", errors.New("scram: the server's signature does not match (not the server we share the password with)")
		}
		c.done = true
		return "", nil
	}
	return "", fmt.Errorf("scram: unexpected step %d", c.step)
}

func (c *scramClient) Done() bool { return c.done }

// clientFinal answers the server-first message with the proof.
func (c *scramClient) clientFinal(serverFirst string) (string, error) {
	attrs := scramAttrs(serverFirst)
	nonce, salt64, iters := attrs["r"], attrs["s"], attrs["i"]
	if !strings.HasPrefix(nonce, c.nonce) || len(nonce) == len(c.nonce) {
		return "", errors.New("scram: the server's nonce does not extend ours")
	}
	salt, err := base64.StdEncoding.DecodeString(salt64)
	if err != nil {
		return "", fmt.Errorf("scram: salt: %w", err)
	}
	n, err := strconv.Atoi(iters)
	if err != nil || n < 1 {
		return "", fmt.Errorf("scram: iteration count %q", iters)
	}
	salted, err := pbkdf2.Key(c.hash, c.pass, salt, n, c.hash().Size())
	if err != nil {
		return "", fmt.Errorf("scram: %w", err)
	}
	clientKey := c.hmac(salted, "Client Key")
	h := c.hash()
	h.Write(clientKey)
	storedKey := h.Sum(nil)
	final := "c=" + base64.StdEncoding.EncodeToString([]byte(c.gs2Header())) + ",r=" + nonce
	authMessage := c.clientFirstBare + "," + serverFirst + "," + final
	sig := c.hmac(storedKey, authMessage)
	proof := make([]byte, len(clientKey))
	for i := range proof {
		proof[i] = clientKey[i] ^ sig[i]
	}
	c.serverSignature = c.hmac(c.hmac(salted, "Server Key"), authMessage)
	return final + ",p=" + base64.StdEncoding.EncodeToString(proof), nil
}

func (c *scramClient) hmac(key []byte, msg string) []byte {
	m := hmac.New(c.hash, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// saslName escapes a name for a SCRAM message.
func saslName(s string) string {
	return strings.NewReplacer("=", "=3D", ",", "=2C").Replace(s)
}

// scramAttrs parses "k=v,k=v".
func scramAttrs(s string) map[string]string {
	out := map[string]string{}
	for f := range strings.SplitSeq(s, ",") {
		if k, v, ok := strings.Cut(f, "="); ok {
			out[k] = v
		}
	}
	return out
}
