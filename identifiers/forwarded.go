package identifiers

import "strings"

// eachForwardedHop calls hop with the "for" node of every element of RFC
// 7239 Forwarded header values, in order, keeping none of them (the header
// is the client's to lengthen). An element without "for", and a value that
// does not parse, give an invalid hop (""), which stops a right-to-left walk:
// after a syntax error nothing further right can be attributed reliably.
func eachForwardedHop(vals []string, hop func(node string)) {
	for _, v := range vals {
		if !eachForwarded(v, hop) {
			hop("")
		}
	}
}

// eachForwarded parses one field value, calling hop with each element's node
// until a syntax error, which it reports:
//
//	Forwarded         = 1#forwarded-element
//	forwarded-element = [ forwarded-pair ] *( ";" [ forwarded-pair ] )
//	forwarded-pair    = token "=" value
//	value             = token / quoted-string
func eachForwarded(s string, hop func(node string)) bool {
	i := 0
	for {
		// One element.
		node, hasFor, pairs := "", false, 0
		for {
			i = skipOWS(s, i)
			if i < len(s) && s[i] != ';' && s[i] != ',' {
				j := i
				for j < len(s) && isTchar(s[j]) {
					j++
				}
				if j == i || j >= len(s) || s[j] != '=' {
					return false
				}
				name := s[i:j]
				pairs++
				val, next, ok := forwardedValue(s, j+1)
				if !ok {
					return false
				}
				if strings.EqualFold(name, "for") {
					if hasFor {
						return false // two "for" pairs in one element
					}
					node, hasFor = val, true
				}
				i = skipOWS(s, next)
			}
			if i >= len(s) || s[i] == ',' {
				break
			}
			if s[i] != ';' {
				return false
			}
			i++
		}
		if hasFor {
			hop(node)
		} else if pairs > 0 { // an element without "for"; empty elements are skipped
			hop("")
		}
		if i >= len(s) {
			return true
		}
		i++ // ','
	}
}

func forwardedValue(s string, i int) (val string, next int, ok bool) {
	if i < len(s) && s[i] == '"' {
		// Without a quoted-pair the value is the text between the quotes,
		// read in place; with one, it is built without the backslashes.
		start := i + 1
		for j := start; j < len(s) && s[j] != '\\'; j++ {
			if s[j] == '"' {
				return s[start:j], j + 1, true
			}
		}
		var b strings.Builder
		for i++; i < len(s); i++ {
			switch c := s[i]; c {
			case '"':
				return b.String(), i + 1, true
			case '\\':
				i++
				if i >= len(s) {
					return "", i, false
				}
				b.WriteByte(s[i])
			default:
				b.WriteByte(c)
			}
		}
		return "", i, false // unterminated
	}
	// A token; brackets and colons are accepted too, for proxies that leave
	// an IPv6 node unquoted (RFC 7239 requires quotes). They cannot hide a
	// delimiter, so leniency here cannot shift hops.
	j := i
	for j < len(s) && (isTchar(s[j]) || s[j] == ':' || s[j] == '[' || s[j] == ']') {
		j++
	}
	if j == i {
		return "", j, false
	}
	return s[i:j], j, true
}

func skipOWS(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return i
}

// isTchar reports whether c is an RFC 9110 token character.
func isTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
