package jetstream

// AskWaitingBoundOfForTest points the leader look-up that bounds x's
// listings at the stream of another bucket, so a test can make the look-up
// fail while the listing's watch would work.
func AskWaitingBoundOfForTest(x *WaitingIndex, bucket string) { x.bucket = bucket }
