package httpapi

// currencies are the ISO 4217 alphabetic codes a charge may be in: the currencies of ISO 4217
// Table A.1 ("List one: current currency & funds"), as published by SIX Financial Information,
// the standard's maintenance agency, and consolidated in the datasets/currency-codes data
// package on 2026-02-01 (its rows without a withdrawal date: BGN, withdrawn 2026-01 when
// Bulgaria joined the euro, and ANG, replaced by XCG in 2025, are gone). 155 codes.
//
// Left out of that list, because no card is charged in them: the funds codes (BOV, CHE, CHW,
// CLF, COU, MXV, USN, UYI, UYW), precious metals (XAG, XAU, XPD, XPT), bond-market and
// accounting units (XBA, XBB, XBC, XBD, XDR, XSU, XUA, XAD), the code for testing (XTS) and
// the one for "no currency" (XXX). The currencies starting with X that are money (XAF, XCD,
// XCG, XOF, XPF) stay.
//
// The minor-unit digits of each currency (JPY 0, USD 2, BHD 3) do not matter here: amount is
// already a whole number of minor units, so no amount is invalid for a currency's exponent;
// the gateways map minor units to what they send.
//
// When ISO 4217 changes (an amendment adds or withdraws a code), update this table and its
// date.
var currencies = setOf(
	"AED", "AFN", "ALL", "AMD", "AOA", "ARS", "AUD", "AWG", "AZN", "BAM", "BBD", "BDT",
	"BHD", "BIF", "BMD", "BND", "BOB", "BRL", "BSD", "BTN", "BWP", "BYN", "BZD", "CAD",
	"CDF", "CHF", "CLP", "CNY", "COP", "CRC", "CUP", "CVE", "CZK", "DJF", "DKK", "DOP",
	"DZD", "EGP", "ERN", "ETB", "EUR", "FJD", "FKP", "GBP", "GEL", "GHS", "GIP", "GMD",
	"GNF", "GTQ", "GYD", "HKD", "HNL", "HTG", "HUF", "IDR", "ILS", "INR", "IQD", "IRR",
	"ISK", "JMD", "JOD", "JPY", "KES", "KGS", "KHR", "KMF", "KPW", "KRW", "KWD", "KYD",
	"KZT", "LAK", "LBP", "LKR", "LRD", "LSL", "LYD", "MAD", "MDL", "MGA", "MKD", "MMK",
	"MNT", "MOP", "MRU", "MUR", "MVR", "MWK", "MXN", "MYR", "MZN", "NAD", "NGN", "NIO",
	"NOK", "NPR", "NZD", "OMR", "PAB", "PEN", "PGK", "PHP", "PKR", "PLN", "PYG", "QAR",
	"RON", "RSD", "RUB", "RWF", "SAR", "SBD", "SCR", "SDG", "SEK", "SGD", "SHP", "SLE",
	"SOS", "SRD", "SSP", "STN", "SVC", "SYP", "SZL", "THB", "TJS", "TMT", "TND", "TOP",
	"TRY", "TTD", "TWD", "TZS", "UAH", "UGX", "USD", "UYU", "UZS", "VED", "VES", "VND",
	"VUV", "WST", "XAF", "XCD", "XCG", "XOF", "XPF", "YER", "ZAR", "ZMW", "ZWG",
)

// setOf is a set of strings.
func setOf(list ...string) map[string]bool {
	m := make(map[string]bool, len(list))
	for _, s := range list {
		m[s] = true
	}
	return m
}
