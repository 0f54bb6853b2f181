#!/usr/bin/env python3
#
# tests/fuzz/capture.py RAW_DIR OUT_DIR - cut fuzz seeds out of captured runner traffic.
#
# RAW_DIR holds one directory per captured program (tests/fuzz/capture.sh), each with the files
# SUNDIAL_CAPTURE_DIR makes: <pid>-<seq>-<Method>-<o|m>[-<worker_id>].bin, one request
# message each. Writes under OUT_DIR (tests/fuzz):
#   pipelines/<src>-<k>.prepare          the PrepareJobRequests (fuzz_fnapi, fuzz_teststream)
#   corpus/fuzz_pipeline/                their Pipelines
#   corpus/fuzz_teststream/              template index + TestStreamPayload
#   corpus/fuzz_jobapi/                  Job API sessions in fz_reader records
#   corpus/fuzz_fnapi/                   pipeline index + one worker's session, and single
#                                        messages
#   corpus/fuzz_coder/                   coder selector + element bytes from Data messages
# Job ids are rewritten to job-001 (same length), since every fuzz input gets a fresh job
# service. Only the standard library is used: the few protobuf fields needed are read from the
# wire format directly.

import hashlib
import os
import re
import shutil
import struct
import sys

# sd__jobsvc_method order (runner/jobservice/jobservice_int.h).
JOB_METHODS = ['Prepare', 'Run', 'GetJobs', 'GetState', 'GetPipeline', 'Cancel', 'Drain',
               'GetStateStream', 'GetMessageStream', 'GetJobMetrics',
               'DescribePipelineOptions', 'ResolveArtifacts', 'GetArtifact',
               'ReverseArtifactRetrievalService']
# sd__fn_stream order (runner/fnapi/fnapi_int.h).
FN_STREAMS = {'Control': 0, 'Data': 1, 'State': 2, 'Logging': 3}
OP_CLIENT_MESSAGE = 14
MAX_MESSAGE = 64 * 1024
MAX_RECORDS = 256
MAX_PIPELINES = 48
MAX_PIPELINES_PER_SOURCE = 6
NAME_RE = re.compile(r'^(\d+)-(\d+)-([A-Za-z]+)-([om])(?:-(.*))?\.bin$')


def varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7f) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def fields(buf):
    """Yield (field number, wire type, value) for one message; bytes for length-delimited."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError('wire type %d' % wt)
        yield num, wt, v


def field(buf, num):
    for n, wt, v in fields(buf):
        if n == num and wt == 2:
            return v
    return None


def teststream_payload(pipeline):
    comps = field(pipeline, 1)
    for n, wt, entry in fields(comps or b''):
        if n != 1 or wt != 2:
            continue
        t = field(entry, 2) or b''
        spec = field(t, 1) or b''
        if field(spec, 1) == b'beam:transform:teststream:v1':
            return field(spec, 3) or b''
    return None


def element_blobs(elements):
    for n, wt, v in fields(elements):
        if n == 1 and wt == 2:
            d = field(v, 3)
            if d:
                yield d


def pb_varint(v):
    out = bytearray()
    v &= (1 << 64) - 1
    while True:
        b = v & 0x7f
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def pb_bytes(num, data):
    return pb_varint(num << 3 | 2) + pb_varint(len(data)) + data


def split_response(instruction_id, first_residual):
    """InstructionResponse{instruction_id, process_bundle_split{channel_splits[...]}}."""
    channel = pb_bytes(1, b'input') + pb_varint(2 << 3) + pb_varint(first_residual - 1) + \
        pb_varint(3 << 3) + pb_varint(first_residual)
    split = pb_bytes(3, channel)
    return pb_bytes(1, instruction_id) + pb_bytes(1003, split)


def record(hdr, payload):
    return bytes([hdr]) + struct.pack('<I', len(payload))[:3] + payload


def rewrite_job(data, k):
    return data.replace(b'job-%03d' % k, b'job-001') if k != 1 else data


def load(src_dir):
    msgs = []
    for name in os.listdir(src_dir):
        m = NAME_RE.match(name)
        if not m:
            continue
        with open(os.path.join(src_dir, name), 'rb') as f:
            data = f.read()
        msgs.append((int(m.group(1)), int(m.group(2)), m.group(3), m.group(4), m.group(5) or '',
                     data))
    msgs.sort()
    return msgs


class Out:
    def __init__(self, root):
        self.root = root
        self.seen = set()
        self.counts = {}

    def put(self, sub, data, limit=60):
        h = hashlib.sha1(data).hexdigest()
        if (sub, h) in self.seen or self.counts.get(sub, 0) >= limit:
            return
        self.seen.add((sub, h))
        self.counts[sub] = self.counts.get(sub, 0) + 1
        d = os.path.join(self.root, sub)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, h[:16]), 'wb') as f:
            f.write(data)


def main(raw, out_dir):
    pipes_dir = os.path.join(out_dir, 'pipelines')
    corpus = os.path.join(out_dir, 'corpus')
    for d in (pipes_dir, corpus):
        shutil.rmtree(d, ignore_errors=True)
    os.makedirs(pipes_dir)
    out = Out(corpus)
    sources = sorted(d for d in os.listdir(raw) if os.path.isdir(os.path.join(raw, d)))

    # Pass 1: the pipelines, named so that sorted order is stable.
    prepares = []  # (name, bytes, src, k)
    by_hash = {}
    for src in sources:
        k = 0
        for (_pid, _seq, method, _kind, _wid, data) in load(os.path.join(raw, src)):
            if method != 'Prepare':
                continue
            k += 1
            h = hashlib.sha1(data).hexdigest()
            if (h in by_hash or len(prepares) >= MAX_PIPELINES or
                    k > MAX_PIPELINES_PER_SOURCE):
                continue
            name = '%s-%03d.prepare' % (src, k)
            by_hash[h] = name
            prepares.append((name, data, src, k))
    prepares.sort()
    index = {(src, k): i for i, (_n, _d, src, k) in enumerate(prepares)}
    templates = [n for (n, d, _s, _k) in prepares
                 if teststream_payload(field(d, 1) or b'') is not None]
    for name, data, _src, _k in prepares:
        with open(os.path.join(pipes_dir, name), 'wb') as f:
            f.write(data)
        pipeline = field(data, 1) or b''
        out.put('fuzz_pipeline', pipeline)
        payload = teststream_payload(pipeline)
        if payload is not None:
            out.put('fuzz_teststream', bytes([templates.index(name)]) + payload)

    # Pass 2: sessions.
    coder_sel = 0
    for src in sources:
        msgs = load(os.path.join(raw, src))
        # Job API: the whole session, and one session per job rewritten to job-001.
        session = []
        per_job = {}
        k = 0
        staging_open = False
        for (_pid, _seq, method, kind, _wid, data) in msgs:
            if method not in JOB_METHODS or len(data) > MAX_MESSAGE:
                continue
            op = JOB_METHODS.index(method)
            if kind == 'm':
                if not staging_open:
                    session.append(record(op, b''))
                    staging_open = True
                session.append(record(OP_CLIENT_MESSAGE, data))
                continue
            session.append(record(op, data))
            if method == 'Prepare':
                k += 1
                per_job[k] = [record(op, data)]
            else:
                for j in per_job:
                    if b'job-%03d' % j in data:
                        per_job[j].append(record(op, rewrite_job(data, j)))
        if session:
            out.put('fuzz_jobapi', b''.join(session[:MAX_RECORDS]))
        for j in sorted(per_job):
            out.put('fuzz_jobapi', b''.join(per_job[j][:MAX_RECORDS]))

        # Fn API: one session per worker, prefixed with its job's pipeline index.
        workers = {}
        for (_pid, _seq, method, kind, wid, data) in msgs:
            if method in FN_STREAMS and kind == 'm' and wid and len(data) <= MAX_MESSAGE:
                workers.setdefault(wid, []).append((FN_STREAMS[method], data))
        for wid, items in sorted(workers.items()):
            m = re.match(r'^job-(\d+)-', wid)
            if not m:
                continue
            j = int(m.group(1))
            if (src, j) not in index:
                continue
            # fuzz_fnapi's selector: 2 * pipeline index (+ 1: the direct_test_splits variant).
            sel = bytes([2 * index[(src, j)]])
            recs = [record(kind, rewrite_job(data, j)) for kind, data in items]
            out.put('fuzz_fnapi', sel + b''.join(recs[:MAX_RECORDS]), limit=100)
            for n, (kind, data) in enumerate(items[:6]):
                out.put('fuzz_fnapi', sel + record(kind, rewrite_job(data, j)), limit=100)
            # The split variant: answer the split requests of every bundle first.
            splits = []
            for kind, data in items:
                iid = field(rewrite_job(data, j), 1) if kind == 0 else None
                if iid and b'-' not in iid.split(b'/')[-1]:
                    splits.append(record(0, split_response(iid + b'-split1', 1)))
                    splits.append(record(0, split_response(iid + b'-split2', 2)))
            if splits:
                out.put('fuzz_fnapi', bytes([sel[0] + 1]) + b''.join(splits + recs)[:1 << 20],
                        limit=100)
            for kind, data in items:
                if kind != 1:
                    continue
                for blob in element_blobs(data):
                    if len(blob) <= 4096:
                        out.put('fuzz_coder', bytes([coder_sel % 12]) + blob, limit=40)
                        coder_sel += 1
    for sub in sorted(out.counts):
        print('capture.py: %s: %d seeds' % (sub, out.counts[sub]))
    print('capture.py: %d pipelines (%d with a TestStream)' % (len(prepares), len(templates)))


if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2])
