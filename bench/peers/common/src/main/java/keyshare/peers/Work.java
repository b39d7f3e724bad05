package keyshare.peers;

import java.time.Instant;
import java.util.concurrent.locks.LockSupport;

/**
 * The simulated work of a record: a sleep whose length depends only on the
 * record's partition and offset, so every peer does the same total work. The
 * Go drivers compute the same function (bench/peers/checker.Work).
 */
public final class Work {
    private final long maxMicros;
    private final int blockPartition;
    private final long blockOffset;
    private final long blockMicros;

    /** @param block "" or PARTITION:OFFSET:MILLIS, a record that takes MILLIS more. */
    public Work(long maxMicros, String block) {
        this.maxMicros = maxMicros;
        if (block == null || block.isEmpty()) {
            blockPartition = -1;
            blockOffset = -1;
            blockMicros = 0;
        } else {
            String[] p = block.split(":");
            blockPartition = Integer.parseInt(p[0]);
            blockOffset = Long.parseLong(p[1]);
            blockMicros = Long.parseLong(p[2]) * 1000;
        }
    }

    /** Microseconds of work for the record (splitmix64 of the offset). */
    public long micros(int partition, long offset) {
        long x = offset * 0x9E3779B97F4A7C15L + partition;
        x ^= x >>> 31;
        x *= 0xBF58476D1CE4E5B9L;
        x ^= x >>> 29;
        long d = Long.remainderUnsigned(x, maxMicros + 1);
        if (partition == blockPartition && offset == blockOffset) {
            d += blockMicros;
        }
        return d;
    }

    /** Sleeps for the record's work. */
    public void run(int partition, long offset) {
        long end = System.nanoTime() + micros(partition, offset) * 1000;
        for (long left; (left = end - System.nanoTime()) > 0; ) {
            LockSupport.parkNanos(left);
        }
    }

    public static long nowMicros() {
        Instant t = Instant.now();
        return t.getEpochSecond() * 1_000_000 + t.getNano() / 1000;
    }
}
