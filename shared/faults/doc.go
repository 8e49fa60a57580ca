// Package faults holds only tests: every endpoint of the API with DynamoDB
// failing (minidyn's failure emulation) at each of its calls in turn, and the
// artifact endpoints with object storage unreachable. They check the answer
// (503 `unavailable` with Retry-After), that nothing was half written, and
// that the same requests succeed once the dependency is back.
package faults
