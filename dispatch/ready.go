package dispatch

// The scheduler's ready queue: lanes with queued items and no other
// holder, served lowest head stamp first. Within a partition stamps follow
// arrival, so its oldest waiting message goes first (subject to lane
// order), which keeps its commit frontier close behind the work done; a
// FIFO of lanes that hands out a lane's whole queue lets newer messages of
// early lanes finish long before older messages of late ones, and the
// frontier (and the in-flight budget behind it) stalls for a whole round.
//
// Across partitions, every item is stamped one past its partition's last
// stamp or past the scheduler's virtual time (the newest head taken from
// the ready queue, or carried on with short of the oldest waiting head:
// shortOfWaitingLocked), whichever is later: start-time fair queuing. The first
// records of a partition that arrive while another works through a
// backlog are served beside the work ready now, not behind the backlog
// (with one global arrival order, a partition with few keys could have its
// whole in-flight share in lane queues, which do not count for pacing, and
// a later partition's first records waited for all of it); and partitions
// with backlogs take turns item by item, to within a bucket of the
// requeued lanes (below). One arrival order for items past a partition's
// share of the pacing backlog would run each busy partition's burst (up
// to Chan) whole before the next one's, and leave the others unserved
// meanwhile: for most of a minute with a handler of tens of milliseconds.
// The price is that a burst whose stamps are older than the head stamp
// of the lane last pushed onto the fresh FIFO (freshLast) sends its lanes
// to the calendar queue instead, and a batch holds several partitions'
// items (finish chains them per partition): a few percent more CPU in the
// in-memory pipeline (docs/ARCHITECTURE.md).
//
// Two structures make it cheap: lanes that become ready because a new item
// arrived go to a FIFO (fresh) while their heads' stamps do not decrease,
// which holds within one partition's burst; the others, and lanes that
// come back with older items queued (released after a batch, or still
// holding items after one was taken), go to a calendar queue on their
// head's stamp (requeued). take compares the two fronts.

// laneList is an intrusive FIFO of lanes.
type laneList[M, T any] struct {
	head, tail *lane[M, T]
}

func (q *laneList[M, T]) push(l *lane[M, T]) {
	l.nextReady = nil
	if q.tail == nil {
		q.head = l
	} else {
		q.tail.nextReady = l
	}
	q.tail = l
}

func (q *laneList[M, T]) pop() {
	l := q.head
	q.head = l.nextReady
	if q.head == nil {
		q.tail = nil
	}
	l.nextReady = nil
}

// bucketQueue orders requeued lanes by their head's stamp, to within a
// bucket of 1<<bucketShift stamps: a calendar queue, O(1) to push and
// amortized O(1) to pop (a binary heap over thousands of backlogged lanes
// cost a sixth of the pipeline's CPU in sift-downs). The ring covers
// len(buckets)<<bucketShift stamps ahead of the oldest bucket; a lane
// newer than the ring's reach joins the last bucket. A lane older than the
// current bucket (it waited behind a running batch, or its partition's
// items were stamped from a virtual time behind that bucket) goes to its
// own bucket, which becomes the current one, while the ring still reaches
// the newest bucket from there; else it joins a FIFO of late lanes served
// before every bucket. A single FIFO for every such lane would serve one
// partition's whole push (up to a lane per key) before the older lanes of
// a partition that pushed just after it.
type bucketQueue[M, T any] struct {
	buckets []laneList[M, T] // ring; index = bucket number & mask
	late    laneList[M, T]   // lanes pushed older than the ring could reach
	nLate   int              // lanes in late
	cur     uint64           // bucket number of the oldest non-empty bucket, when a bucket holds a lane
	top     uint64           // no bucket past it holds a lane (the newest pushed to since the buckets were empty)
	n       int              // lanes queued, late ones included
}

const (
	bucketShift = 4
	bucketRing  = 4096 // covers 64k stamps: the default MaxInFlight
)

func (q *bucketQueue[M, T]) push(l *lane[M, T], stamp uint64) {
	if q.buckets == nil {
		q.buckets = make([]laneList[M, T], bucketRing)
	}
	b := stamp >> bucketShift
	q.n++
	switch {
	case q.n-q.nLate == 1:
		q.cur, q.top = b, b // the buckets were empty
	case b < q.cur && q.top-b >= bucketRing:
		q.late.push(l)
		q.nLate++
		return
	case b < q.cur:
		q.cur = b
	case b >= q.cur+bucketRing:
		b = q.cur + bucketRing - 1
	}
	q.top = max(q.top, b)
	q.buckets[b&(bucketRing-1)].push(l)
}

// front returns the oldest queued lane without removing it, or nil.
func (q *bucketQueue[M, T]) front() *lane[M, T] {
	if q.late.head != nil {
		return q.late.head
	}
	if q.n == 0 {
		return nil
	}
	for q.buckets[q.cur&(bucketRing-1)].head == nil {
		q.cur++
	}
	return q.buckets[q.cur&(bucketRing-1)].head
}

// pop removes the lane front returned.
func (q *bucketQueue[M, T]) pop() {
	q.n--
	if q.late.head != nil {
		q.late.pop()
		q.nLate--
		return
	}
	q.buckets[q.cur&(bucketRing-1)].pop()
}
