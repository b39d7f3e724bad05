package keyshare.peers;

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;

/**
 * The record log every driver writes, one tab-separated line per handled
 * record: topic, partition, offset, key, attempt, start and end (Unix
 * microseconds), instance. The Go checker (bench/peers/checker) reads it.
 *
 * <p>A line is handed to the OS (one unbuffered write) before the record is
 * acknowledged or marked done, so a SIGKILL loses only records whose work had
 * not finished: the log is the record of side effects, as a real handler's
 * writes would be.
 */
public final class RecordLog implements AutoCloseable {
    private final FileOutputStream out;
    private final String instance;

    public RecordLog(String path, String instance) {
        try {
            this.out = new FileOutputStream(path, true);
        } catch (IOException e) {
            throw new UncheckedIOException("record log " + path, e);
        }
        this.instance = instance;
    }

    public void write(String topic, int partition, long offset, String key, int attempt, long startMicros, long endMicros) {
        String line = topic + '\t' + partition + '\t' + offset + '\t' + key + '\t' + attempt + '\t'
                + startMicros + '\t' + endMicros + '\t' + instance + '\n';
        byte[] b = line.getBytes(StandardCharsets.UTF_8);
        synchronized (this) {
            try {
                out.write(b);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    }

    @Override
    public synchronized void close() throws IOException {
        out.close();
    }
}
