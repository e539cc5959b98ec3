package payrouter

import "crypto/tls"

// TLS12CipherSuites are the only cipher suites payrouter offers or accepts under TLS 1.2, on
// its listeners and to gateways: ECDHE key exchange with an AEAD cipher. Go's defaults also
// allow CBC suites with SHA-1 (and others with RSA key exchange) for old clients; none of them
// is needed by a storefront or a payment gateway, and each has known weaknesses. TLS 1.3's
// suites are all AEAD and not configurable.
var TLS12CipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}
