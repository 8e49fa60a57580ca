// Package scale holds the fleet simulation (fleet_test.go): many
// organizations' environments touched, leased and stopped, idle nodes
// heartbeating, and the scheduled jobs, driven through the services against
// the local table with a fake clock, counting every DynamoDB write by
// partition key and write units (store.CallCounter). docs/scale.md
// records its figures. It has no code of its own.
package scale
