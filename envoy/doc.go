// Package ratekitenvoy serves Envoy's global rate-limit service from ratekit limiters.
package ratekitenvoy
