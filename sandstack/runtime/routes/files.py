"""The routes of a bound sandbox's files: read (a file streamed, or a directory's listing), write (streamed in),
delete, and the workspace as an archive."""

from __future__ import annotations

from typing import IO, Any, Iterator, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response, StreamingResponse
from starlette.convertors import Convertor, register_url_convertor

from sandstack.runtime.answers import AsciiJSON
from sandstack.runtime.files import ARCHIVE_FORMATS
from sandstack.runtime.files_stream import open_read
from sandstack.runtime.files_upload import upload
from sandstack.runtime.models import Listing
from sandstack.runtime.routes.common import BINARY, ERRORS, bound, require_token, sandbox_param

router = APIRouter(prefix="/v1", dependencies=[Depends(require_token)], responses=ERRORS)


class FilePath(Convertor):
    """A file path in the workspace, slashes and every other character included: Starlette's own `path`
    convertor ('.*') stops at a newline, so a listed name holding one could not be read, written or deleted."""

    regex = r"[\s\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("sandstack_file_path", FilePath())
FILE = "/sandboxes/{sandbox}/files/{path:sandstack_file_path}"


def chunks(file: IO[bytes], size: int = 64 * 1024) -> Iterator[bytes]:
    with file:
        while chunk := file.read(size):
            yield chunk


@router.get(FILE, operation_id="read_file",
            responses={200: {"model": Listing, "content": BINARY,
                             "description": "A file's bytes, or a directory's listing as JSON."}})
def read_file(request: Request, path: str, sandbox: str = sandbox_param()) -> Any:
    opened = open_read(bound(request, sandbox).files, sandbox, path)  # streamed from the sandbox, never spooled
    if opened.entries is not None:
        return AsciiJSON({"path": path, "entries": opened.entries})
    return StreamingResponse(opened.chunks, media_type="application/octet-stream",
                             headers={} if opened.size is None else {"Content-Length": str(opened.size)})


@router.put(FILE, status_code=204, response_class=Response, response_model=None, operation_id="write_file",
            openapi_extra={"requestBody": {"required": True, "content": BINARY}})
async def write_file(request: Request, path: str, sandbox: str = sandbox_param()) -> Any:
    """Write a file (parents are created); over the pool's upload limit → 413."""
    runtime = await run_in_threadpool(bound, request, sandbox)
    await upload(request, runtime.files, sandbox, path)  # streamed into the sandbox, never spooled
    return Response(status_code=204)


@router.delete(FILE, status_code=204, response_class=Response, response_model=None, operation_id="delete_file")
def delete_file(request: Request, path: str, sandbox: str = sandbox_param()) -> Any:
    bound(request, sandbox).files.delete(sandbox, path)
    return Response(status_code=204)


@router.get("/sandboxes/{sandbox}/archive", operation_id="archive",
            responses={200: {"content": {media: {"schema": {"type": "string", "format": "binary"}}
                                         for media in ARCHIVE_FORMATS.values()},
                             "description": "The workspace as an archive."}})
def archive(request: Request, sandbox: str = sandbox_param(),
            format: Literal["tar.gz", "zip"] = Query("tar.gz", description="The archive format.")) -> Any:
    """The workspace as a tar.gz or zip (a session's 'download your work')."""
    packed = bound(request, sandbox).files.archive(sandbox, format)
    headers = {"Content-Disposition": f'attachment; filename="{sandbox}-workspace.{format}"'}
    return StreamingResponse(chunks(packed), media_type=ARCHIVE_FORMATS[format], headers=headers)
