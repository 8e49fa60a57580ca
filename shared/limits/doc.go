// Package limits holds only tests: requests at the edges DynamoDB enforces
// (item size, actions per transaction, key lengths, cursors), run against
// minidyn and against DynamoDB Local, which enforces them as DynamoDB does.
// Every request at a limit is stored and read back; every request past one is
// refused with a 4xx naming the field before anything is written; none can
// produce a 5xx.
package limits
