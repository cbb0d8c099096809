package oauth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"time"
)

// AuthPrivateKeyJWT is the client authentication by a JWT the client signs with its private key
// (RFC 7523 §2.2, OpenID Connect's private_key_jwt): no shared secret goes to the server.
const AuthPrivateKeyJWT = "private_key_jwt"

// clientAssertionType is the client_assertion_type of a JWT assertion (RFC 7523).
const clientAssertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

// assertionLifetime is how long a client assertion is good for.
const assertionLifetime = time.Minute

// clientAssertion is a JWT naming the client as issuer and subject and the token endpoint as
// audience, signed with keyPEM (a PKCS #8, EC or PKCS #1 private key): ES256 for a P-256 key,
// RS256 for an RSA one.
func clientAssertion(clientID, tokenEndpoint, keyPEM string, now time.Time) (string, error) {
	key, err := ParsePrivateKey(keyPEM)
	if err != nil {
		return "", err
	}
	jti := make([]byte, 16)
	_, _ = rand.Read(jti)
	claims := map[string]any{"iss": clientID, "sub": clientID, "aud": tokenEndpoint,
		"iat": now.Unix(), "exp": now.Add(assertionLifetime).Unix(), "jti": base64.RawURLEncoding.EncodeToString(jti)}
	var alg string
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		alg = "ES256"
		if k.Curve.Params().BitSize != 256 {
			return "", errors.New("the client's EC key is not P-256 (ES256)")
		}
	case *rsa.PrivateKey:
		alg = "RS256"
	}
	header, _ := json.Marshal(map[string]string{"alg": alg, "typ": "JWT"})
	body, _ := json.Marshal(claims)
	input := base64.RawURLEncoding.EncodeToString(header) + "." + base64.RawURLEncoding.EncodeToString(body)
	sig, err := sign(key, input)
	if err != nil {
		return "", err
	}
	return input + "." + base64.RawURLEncoding.EncodeToString(sig), nil
}

// sign signs a JWS input: ES256 as the fixed-size r||s, RS256 as PKCS #1 v1.5.
func sign(key crypto.Signer, input string) ([]byte, error) {
	digest := sha256.Sum256([]byte(input))
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		r, s, err := ecdsa.Sign(rand.Reader, k, digest[:])
		if err != nil {
			return nil, err
		}
		out := make([]byte, 64)
		r.FillBytes(out[:32])
		s.FillBytes(out[32:])
		return out, nil
	case *rsa.PrivateKey:
		return rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, digest[:])
	}
	return nil, errors.New("the client's key is neither EC nor RSA")
}

// ParsePrivateKey reads a PEM private key: PKCS #8, SEC 1 (EC) or PKCS #1 (RSA).
func ParsePrivateKey(keyPEM string) (crypto.Signer, error) {
	block, _ := pem.Decode([]byte(keyPEM))
	if block == nil {
		return nil, errors.New("the client's private key is not PEM")
	}
	if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		if s, ok := k.(crypto.Signer); ok && (isEC(s) || isRSA(s)) {
			return s, nil
		}
		return nil, fmt.Errorf("the client's private key is a %T, not EC or RSA", k)
	}
	if k, err := x509.ParseECPrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	return nil, errors.New("the client's private key is not a PKCS #8, EC or RSA key")
}

func isEC(s crypto.Signer) bool  { _, ok := s.(*ecdsa.PrivateKey); return ok }
func isRSA(s crypto.Signer) bool { _, ok := s.(*rsa.PrivateKey); return ok }
